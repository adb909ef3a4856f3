"""Run the emulator by hand: ``python -m plnt_testkit.kube_emulator --kubeconfig F``."""

import argparse
import threading
from pathlib import Path

from plnt_testkit.kube_emulator.emulator import KubeEmulator


def main() -> None:
    parser = argparse.ArgumentParser(description="Kubernetes API emulator for plnt tests")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--kubeconfig", type=Path, required=True, help="where to write it")
    parser.add_argument("--history-window", type=int, default=1000)
    parser.add_argument("--bookmark-interval", type=float, default=1.0, help="seconds")
    parser.add_argument(
        "--without-crds",
        action="store_true",
        help="start without plnt's CRDs (kubectl apply -f crds/ installs them)",
    )
    args = parser.parse_args()
    emulator = KubeEmulator(
        port=args.port,
        crds=() if args.without_crds else None,
        history_window=args.history_window,
        bookmark_interval_s=args.bookmark_interval,
    ).start()
    emulator.write_kubeconfig(args.kubeconfig)
    print(f"serving {emulator.url}; kubeconfig {args.kubeconfig}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        emulator.stop()


if __name__ == "__main__":
    main()
