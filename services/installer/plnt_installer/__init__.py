"""The installer: turns spec.pulled into a running canary, and compensates releases.

It owns releases (install, retire, uninstall) through the ``ReleaseBackend`` port; it
does not route traffic (the promoter) nor judge a canary (smoke).
"""
