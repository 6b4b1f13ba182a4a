# SPDX-License-Identifier: Apache-2.0
"""The one harness for running ringfleet for real: processes, waiting, faults.

In the manner of kazoo's testing harness: functional tests, the chaos suite
and the benchmarks start the services as real child processes
(:class:`ServiceProcess`), wait on conditions with a deadline that names
what was awaited (:func:`wait_for`), and inject faults the same way: on a
process (:meth:`ServiceProcess.kill`, :meth:`~ServiceProcess.pause`,
:meth:`~ServiceProcess.terminate`) or on a server started by
``tools/with-test-servers.sh`` (:func:`server_ctl`: restart the broker,
etcd or the database).
"""

from tests.harness.process import REPO, ServiceProcess
from tests.harness.servers import server_ctl
from tests.harness.wait import wait_for

__all__ = ["REPO", "ServiceProcess", "server_ctl", "wait_for"]
