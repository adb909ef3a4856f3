"""I/O of the promoter: the ``plnt-routes`` KV."""
