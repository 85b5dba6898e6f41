"""``fairshare up``: the whole system on one machine, each service its own process.

The services are the same commands an operator runs one by one (``fairshare charging``,
``projector``, ``scheduler``, ``agent simulated|local``, ``api serve``), started as child
processes with their logs under ``<data dir>/logs/``; only the broker is shared. So what the demo
shows is what a deployment does, and a test can kill one service and watch the others cope.

The lab (budgets, members) is written once, on the first start against an empty log; a steady
synthetic stream of workloads then goes in through the API, as users would submit them.

The modules import the bus and the client inside their functions: ``services.cli`` imports this
package (for its commands) on every ``fairshare`` start.
"""

from services.launcher.config import UpConfig
from services.launcher.stack import Stack, run_stack

__all__ = ["Stack", "UpConfig", "run_stack"]
