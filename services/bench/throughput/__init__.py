"""``fairshare bench throughput`` (``bench.py``): Fairshare's API (``fairshare.py``) against
``sbatch`` on a real Slurm (``slurm.py``), both phases turned into figures one way
(``figures.py``)."""
