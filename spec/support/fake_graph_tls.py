"""HTTPS for the fake Graph API (fake_graph.py): the same handler on a second
port, over TLS, so that specs can give sgw https:// image URLs that it really
fetches (Instagram takes images over HTTPS only) and check what it refuses.

    python3 spec/support/fake_graph.py --port N --https-port M --tls-dir DIR

At start a self-signed certificate for 127.0.0.1 and localhost is made with
`openssl req -x509` into DIR (cert.pem, key.pem); give sgw DIR/cert.pem as
http.ca_file. Everything the plain port answers, the https port answers too
(the Graph API, /_fake/..., the assets); the plain port is unchanged. The
fake's own fetches of image URLs (Meta fetching a container's image_url)
trust that certificate as well.

Control API (on either port):
  GET    /_fake/tls                    {"https_port","ca_file","connections","requests":[path, ...]}
                                       TLS connections accepted on the https port and
                                       the paths asked there, since start or the last DELETE
  DELETE /_fake/tls                    zeroes them

Asset options for the fetch's failure modes (fake_graph.py's asset()):
  ?delay_ms=N on any asset             answers after N ms (a time-out)
  GET /_fake/assets/redirect?to=URL    302 with Location: URL (a hop); without
                                       to, Location is itself (a loop)

Python 3 standard library and the openssl command only.
"""
import os
import ssl
import subprocess
import sys
import threading
import urllib.request

fg = None
STATE = {"https_port": None, "ca_file": None, "connections": 0, "requests": []}
LOCK = threading.Lock()


def make_certificate(directory):
    os.makedirs(directory, exist_ok=True)
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-addext", "basicConstraints=critical,CA:TRUE",
                    "-keyout", key, "-out", cert],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return cert, key


def record_request(path):
    with LOCK:
        STATE["requests"].append(path)


def serve(app, host, port, directory):
    """Starts the https server in a thread; returns the port it listens on."""
    cert, key = make_certificate(directory)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    # Meta's fetches of image URLs (fetch_url) trust this certificate too.
    fg._OPENER = urllib.request.build_opener(
        urllib.request.ProxyHandler({}),
        urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=cert)))

    class TLSServer(fg.Server):
        is_tls = True

        def get_request(self):
            sock, addr = self.socket.accept()
            with LOCK:
                STATE["connections"] += 1
            # The handshake runs in the handler's thread (do_handshake_on_connect
            # on first read), so a stalled client cannot block accept().
            return context.wrap_socket(sock, server_side=True), addr

        def handle_error(self, request, client_address):
            pass   # clients that refuse the certificate or hang up mid-handshake

    server = TLSServer((host, port), fg.Handler)
    server.app = app
    STATE["https_port"], STATE["ca_file"] = server.server_address[1], cert
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    return server.server_address[1]


def c_tls(app, params, body):
    with LOCK:
        return {"https_port": STATE["https_port"], "ca_file": STATE["ca_file"],
                "connections": STATE["connections"], "requests": list(STATE["requests"])}


def c_clear_tls(app, params, body):
    with LOCK:
        STATE["connections"] = 0
        STATE["requests"] = []
    return {"ok": True}


def install(module):
    """Registers the control endpoints into a fake_graph module (once)."""
    global fg
    if getattr(module, "_tls_installed", False):
        return
    fg = module
    module._tls_installed = True
    module.control("GET", "tls")(c_tls)
    module.control("DELETE", "tls")(c_clear_tls)


if __name__ == "__main__":
    sys.exit("fake_graph_tls is part of fake_graph.py; run that instead")
