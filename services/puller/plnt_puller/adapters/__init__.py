"""The puller's I/O: registries (file system, S3 via boto3, OCI
registries via ``plnt_common.oci``), the PlntBackend catalog (the
embedded store or the Kubernetes API) and the ``plnt-specs`` object store.

Adapters do what they are told: they never decide whether a run fails, which reason it
gets or whether to retry. Every infrastructure error leaves them as a
``plnt_common.errors`` type (``SpecNotFound``, ``RegistryUnavailable``, ...) raised
``from None``, so handlers decide by type alone.
"""
