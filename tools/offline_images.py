"""Build the compose file's Scrollback image with no registry (`./scripts/compose --offline`).

The recipe the container tests use (tests/integration/deploy/compose_engine.py): Debian's
`debootstrap` makes a bookworm root filesystem with Python that `docker import` turns into
the base image, `pip download` fetches the dependencies' wheels on the host into
`wheelhouse/` (git-ignored), and the image is built from them with `--network=none`. The
root filesystem and the wheels are cached in ~/.cache/scrollback/deploy
(SCROLLBACK_DEPLOY_CACHE). Needs root (debootstrap), Debian's debootstrap package, a
Docker engine and the dev venv (`./scripts/test --quick` makes it). Prints the image's tag.

    python tools/offline_images.py [--tag scrollback:latest]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def build(tag: str) -> str:
    """Import the base and build the image `tag` offline; the tag."""
    from tests.integration.deploy.compose_engine import rootfs_tarball, wheelhouse

    tarball = rootfs_tarball()
    base = f"scrollback-base:{tarball.stem.removeprefix('rootfs-')}"
    subprocess.run(["docker", "import", str(tarball), base], check=True, stdout=subprocess.DEVNULL)
    context_wheels = REPO / "wheelhouse"
    created = not context_wheels.exists()
    context_wheels.mkdir(exist_ok=True)
    try:
        for wheel in wheelhouse().iterdir():
            shutil.copy2(wheel, context_wheels / wheel.name)
        subprocess.run(
            ["docker", "build", "--network=none", f"--build-arg=PYTHON_IMAGE={base}",
             f"--tag={tag}", str(REPO)],
            check=True,
        )  # fmt: skip
    finally:
        if created:
            shutil.rmtree(context_wheels, ignore_errors=True)
    return tag


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", default="scrollback:latest", help="the image's tag")
    args = parser.parse_args()
    try:
        print(build(args.tag))
    except subprocess.CalledProcessError as error:
        print(f"offline_images: {error.cmd[:2]} failed ({error.returncode})", file=sys.stderr)
        return 1
    except BaseException as error:  # the recipe's pytest.skip / pytest.fail: say why, once
        if isinstance(error, KeyboardInterrupt | SystemExit):
            raise
        print(f"offline_images: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
