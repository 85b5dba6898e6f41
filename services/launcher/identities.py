"""Who each service of a stack is on the Kafka it runs against.

One rule for every launcher (``fairshare up``, the benchmarks' stacks): on a secured broker the
launcher started, every service gets a principal of its own, created and granted before the
services start, and the launcher itself acts as the admin (it creates topics, the demo lab
writes budgets). A service never inherits the launcher's identity: an admin's password in a
child would undo the roles.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

from services.brokers.handle import BrokerHandle
from services.brokers.security import admin_settings_file
from services.bus.connection import KAFKA_CONFIG_ENV, use_config_file
from services.bus.principals import set_up_principals

from .config import UpConfig

__all__ = ["stack_identities"]


@contextmanager
def stack_identities(
    broker: BrokerHandle, config: UpConfig, say: Callable[[str], None]
) -> Iterator[UpConfig]:
    """``config`` with each service's client settings when ``broker`` is secured and ours.

    On a secured broker of its own: every service's principal created and granted (their
    passwords in ``<broker dir>/security/secrets.json``), ``config`` naming each one's client
    file, and this process acting as the admin while the block runs. On a plain broker of its
    own, no settings of an external Kafka (``--kafka-config``, ``$FAIRSHARE_KAFKA_CONFIG``)
    reach its services. An external broker: ``config`` as it is (whoever runs it says how to
    reach it). This process's own settings are restored afterwards: a benchmark run inside a
    test session must not leave the session talking to its session broker as another's admin.
    """
    if broker.kind == "external":
        yield config
        return
    saved = os.environ.pop(KAFKA_CONFIG_ENV, None)
    try:
        if saved:
            say("--kafka-config ignored: it is for an external --kafka")
        if broker.security_dir is None:
            yield config
            return
        started = time.monotonic()
        identities = set_up_principals(
            broker.bootstrap, broker.identity, config.topics, config.pools, broker.security_dir
        )
        use_config_file(admin_settings_file(broker.security_dir))
        say(
            f"kafka    SASL_SSL, SCRAM-SHA-512, a principal per service with ACLs "
            f"({time.monotonic() - started:.1f} s); client settings in "
            f"{broker.security_dir / 'clients'}"
        )
        yield replace(config, kafka_identities=identities)
    finally:
        if saved is None:
            os.environ.pop(KAFKA_CONFIG_ENV, None)
        else:
            os.environ[KAFKA_CONFIG_ENV] = saved
