"""Builders for tests and benchmarks only, never for user-facing output.

``synthetic`` makes SYNTHETIC profiles (a made-up time/workspace model, labelled as such in the
profile's provenance and file names); ``networks`` holds the small hand-built and paper networks the
memory tests share; ``reference`` holds brute-force enumerations the optimizer tests compare against.
They live in the package, not in ``tests/``, so that benchmarks and tests import them the same way and
no test module imports another.
"""
