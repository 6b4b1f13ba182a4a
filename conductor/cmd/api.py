# SPDX-License-Identifier: Apache-2.0
"""``ringfleet-api``: the HTTP API on a development server (threaded wsgiref).

For production run the application under gunicorn or uwsgi
(:mod:`conductor.api.wsgi`, ``docs/http-api.rst``).
"""

from __future__ import annotations

import logging
import socketserver
import sys
from collections.abc import Sequence
from wsgiref import simple_server

from conductor.api import wsgi

LOG = logging.getLogger(__name__)


class _ThreadingServer(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True


class _QuietHandler(simple_server.WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """The application logs every request itself."""


def main(argv: Sequence[str] | None = None) -> int:
    conf = wsgi.configure(list(argv) if argv is not None else sys.argv)
    application = wsgi.build_application(conf)
    server = simple_server.make_server(
        conf.api.host_ip,
        conf.api.port,
        application,
        server_class=_ThreadingServer,
        handler_class=_QuietHandler,
    )
    LOG.info(
        "ringfleet-api (development server) serving http://%s:%d/",
        conf.api.host_ip,
        server.server_port,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
