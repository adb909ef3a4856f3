"""plnt's test kit: fakes of external systems that behave like the real ones in what plnt
depends on (an OpenAI-compatible LLM, S3 via moto, the Kubernetes API), and helpers for
clusters, projections and events.

Dev-only: it is not part of the wheel. pytest puts ``testkit/`` on the path
(``pythonpath`` in pyproject.toml) and ``bench`` does the same for itself.
"""
