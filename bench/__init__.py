"""The benchmark of one upgate gateway process against the mock provider: `python -m bench`."""
