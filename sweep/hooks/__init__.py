"""Test-only seams of the trainable: trial hooks and the crash the tests inject (hidden flags; no
user's sweep has one)."""
