"""Test support shipped with plnt: fakes of external systems that behave like the real ones
in what plnt depends on (an OpenAI-compatible LLM, S3 via moto, the Kubernetes API).

Imported by tests, benchmarks and demos only; no service code path imports it.
"""
