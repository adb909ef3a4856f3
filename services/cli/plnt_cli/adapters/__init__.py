"""The CLI's I/O toward registries: ``PublishTarget`` implementations (``plnt publish``).

They do what they are told and translate every infrastructure error into a
``plnt_common.errors`` type raised ``from None``; deciding what to upload is
``plnt_cli.publish``'s.
"""
