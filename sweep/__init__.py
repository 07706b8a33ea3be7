"""Ray lives here: the sweeps, the store, the report. Importing it checks the versions of the
packages it runs on against their floors (``model.floors``; metadata only, nothing imported)."""

from model.floors import check_floors

check_floors(("ray", "pyarrow", "pandas", "scipy", "numpy", "torch"))
