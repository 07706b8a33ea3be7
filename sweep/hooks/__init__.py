"""Test-only seams of the trainable, apart from the path a user's sweep takes: trial hooks
(``base``), the crash the tests inject (``faults``), and the hidden flags that name them and the
Tune config they travel in (``config``). No user's sweep has one."""
