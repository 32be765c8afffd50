"""kernelpro.energy: NVML energy measurement and the energy / EDP objectives. Not
built yet: see the open issue "`kernelpro search`"."""

__all__: list[str] = []
