"""I/O of the watcher: the resource source and the ``plnt-runs`` projection bucket."""
