#!/usr/bin/python3
"""notify_listener.py SOCKET OUT: stands in for systemd's notification socket.

Binds a unix datagram socket at SOCKET and appends each datagram to OUT as one
line (its own newlines written as " | "), flushed at once so that a spec can
wait on the file. Exits after STOPPING=1, or after 120 s without a datagram.
"""
import os
import socket
import sys

path, out = sys.argv[1], sys.argv[2]
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(path)
sock.settimeout(120)
with open(out, "a", encoding="utf-8") as f:
    f.write("LISTENING\n")
    f.flush()
    try:
        while True:
            data = sock.recv(4096).decode("utf-8", "replace")
            f.write(data.replace("\n", " | ") + "\n")
            f.flush()
            if data.startswith("STOPPING=1"):
                break
    except socket.timeout:
        pass
os.unlink(path)
