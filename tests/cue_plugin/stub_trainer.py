"""A stand-in for ``python -m trainer`` (a rank) in frame tests (no torch).

Records its arguments and COPYCAT/CUDA variables in RUN_DIR/stub_rank_N.json and prints a progress
line. With a world of 2, rank 0 listens on COPYCAT_MAIN_PORT with SO_REUSEADDR (as TCPStore does)
until rank 1 connects and says hello; rank 1 connects to COPYCAT_MAIN_ADDR:PORT. Exit code:
$STUB_EXIT (default 0), after sleeping $STUB_SLEEP seconds (default 0).
"""

import json
import os
import socket
import sys
import time

NAMES = ("COPYCAT_MAIN_ADDR", "COPYCAT_MAIN_PORT", "COPYCAT_RANK", "COPYCAT_WORLD_SIZE", "COPYCAT_SYNC_INTERVAL",
         "CUETRAIN_GANG_TOKEN", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "OMP_NUM_THREADS", "PYTHONUNBUFFERED")


def serve(port: int) -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("", port))
        s.listen()
        s.settimeout(30)
        while True:
            conn, _ = s.accept()
            with conn:
                conn.settimeout(5)
                try:
                    if conn.recv(16) == b"hello":
                        conn.sendall(b"welcome")
                        return
                except OSError:
                    pass  # the frame's TCP probe: connects and closes


def join(host: str, port: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection((host, port), timeout=5) as c:
                c.sendall(b"hello")
                if c.recv(16) == b"welcome":
                    return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def main() -> int:
    args = sys.argv[1:]
    run_dir = args[args.index("--run-dir") + 1]
    env = {k: os.environ.get(k) for k in NAMES}
    rank, world, port = int(env["COPYCAT_RANK"]), int(env["COPYCAT_WORLD_SIZE"]), int(env["COPYCAT_MAIN_PORT"])
    with open(os.path.join(run_dir, f"stub_rank_{rank}.json"), "w") as fh:
        json.dump({"argv": args, "env": env}, fh)
    if world == 2:
        serve(port) if rank == 0 else join(env["COPYCAT_MAIN_ADDR"], port)
    print(f"[Step:1/1] loss=0.5 rank {rank}", flush=True)
    time.sleep(float(os.environ.get("STUB_SLEEP", "0")))
    return int(os.environ.get("STUB_EXIT", "0"))


if __name__ == "__main__":
    sys.exit(main())
