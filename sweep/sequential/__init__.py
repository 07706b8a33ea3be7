"""``--seeds auto`` (SPEC §8): the rounds (``rounds``), their units, plans and looks (``state``), the
record (``record``), what they print (``text``), the baseline's family (``baseline``) and the flags
(``flags``, without pandas or scipy). Above the driver: each round is an ordinary ``run_sweep``."""
