"""``--seeds auto`` (SPEC §8): the rounds, their state and plan, the record, what they print, the
baseline's family and the flags."""
