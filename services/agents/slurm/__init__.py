"""The Slurm family: Fairshare decides, Slurm executes.

* :mod:`~services.agents.slurm.adapter`: each run one batch job pinned to its placement;
* :mod:`~services.agents.slurm.agent`: the loop over it, with what a shared cluster adds
  (drains both ways, jobs submitted around Fairshare, stray jobs);
* :mod:`~services.agents.slurm.commands`: the Slurm commands the agent runs, and nothing else;
* :mod:`~services.agents.slurm.parse`: what they print, read into values;
* :mod:`~services.agents.slurm.submit`: a run as an ``sbatch`` call and its batch script.
"""

from services.agents.slurm.adapter import SlurmAdapter
from services.agents.slurm.agent import SlurmAgent

__all__ = ["SlurmAdapter", "SlurmAgent"]
