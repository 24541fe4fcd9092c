"""A TCP proxy on 127.0.0.1 that can stall: a server that stops answering mid-run, without being stopped.

While stalled it keeps every connection open and swallows what clients send, so requests time out the way
they do against a store that hangs (not the quick refusal of a closed port).
"""

from __future__ import annotations

import socket
import threading

from tests.integration.support.servers import free_port


class StallingProxy:
    def __init__(self, upstream_port: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.upstream_port = upstream_port
        self.stalled = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._listener.settimeout(0.2)
        self._stopping = threading.Event()
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name="stalling-proxy", daemon=True)

    def start(self) -> StallingProxy:
        self._thread.start()
        return self

    def stall(self) -> None:
        self.stalled.set()

    def resume(self) -> None:
        self.stalled.clear()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(5)
        self._listener.close()
        for sock in list(self._sockets):
            sock.close()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            self._sockets += [client, upstream]
            for source, target, swallow in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pump, args=(source, target, swallow), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, swallow: bool) -> None:
        try:
            while data := source.recv(1 << 16):
                if swallow and self.stalled.is_set():
                    continue  # the request never arrives, so no answer ever comes
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
