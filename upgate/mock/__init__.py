"""The mock provider: an OpenAI-style upstream for the demo, the tests and the benchmarks."""
