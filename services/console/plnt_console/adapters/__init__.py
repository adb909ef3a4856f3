"""The console's doors to I/O libraries that only some deployments use (the Kubernetes API)."""
