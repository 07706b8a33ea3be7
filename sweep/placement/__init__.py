"""Where trials run: which runs share a trial (packs), how trials fill the GPUs (the schedule, priced
by sweep/costs.json), and the one place that starts Ray and reads its GPUs (``ray_env``)."""
