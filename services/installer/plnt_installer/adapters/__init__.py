"""Adapters of the installer's ``ReleaseBackend`` port: the installer's only backend I/O.

Each one does what it is told; whether to install, retire or roll back is decided in
the installer's logic.
"""
