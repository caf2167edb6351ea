#!/bin/sh
# `make image`: build the repository's Dockerfile with buildah into an OCI archive under dist/.
#
# BASE=debian (default): the base image is made here from Debian's packages (mmdebstrap, bookworm: Python
#   3.11 with pip) and handed to the Dockerfile through its PYTHON_IMAGE build argument, so no image
#   registry is needed. BASE=<image reference> uses that image instead (e.g. python:3.11-slim-bookworm,
#   the Dockerfile's own default, for a machine that can pull from Docker Hub).
# Output: dist/carve-<version>.oci.tar (an OCI archive: `ctr images import`, `podman load`, `skopeo copy
#   oci-archive:...`), tagged <IMAGE>:<version>; the base rootfs is cached in dist/base-bookworm.tar.
# Storage is buildah's vfs driver under $BUILDAH_ROOT (default .buildah/), isolation chroot: it runs as
# root on a plain host or in a container without overlayfs or user namespaces.
set -eu
cd "$(dirname "$0")/.."
VERSION="${VERSION:-$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -n1)}"
IMAGE="${IMAGE:-localhost/carve}"
BASE="${BASE:-debian}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
ROOT="${BUILDAH_ROOT:-$PWD/.buildah}"
OUT="dist/carve-$VERSION.oci.tar"
# The CA bundle the Debian base trusts (and so the image built from it): the host's, when pip here is
# told to use one (PIP_CERT / SSL_CERT_FILE), else Debian's own. CA_BUNDLE= (empty) keeps Debian's.
CA_BUNDLE="${CA_BUNDLE-${PIP_CERT:-${SSL_CERT_FILE:-}}}"
BA="buildah --root $ROOT/storage --runroot $ROOT/run --storage-driver vfs"
mkdir -p dist "$ROOT"
command -v buildah >/dev/null || { echo "make image: needs buildah (Debian: apt-get install buildah)"; exit 2; }
start=$(date +%s)

if [ "$BASE" = debian ]; then
  BASE_REF=localhost/carve-base:bookworm
  [ -z "${REBASE:-}" ] || $BA rmi -f "$BASE_REF" >/dev/null 2>&1 || true
  if ! $BA inspect --type image "$BASE_REF" >/dev/null 2>&1; then
    if [ ! -s dist/base-bookworm.tar ]; then
      command -v mmdebstrap >/dev/null || { echo "make image: needs mmdebstrap (apt-get install mmdebstrap)"; exit 2; }
      # What python:3.11-slim-bookworm offers the Dockerfile: python, pip (allowed to install into the
      # system Python, as in that image), apt for the build stage's compiler.
      mmdebstrap --variant=apt --format=tar --include=python3,python3-pip,python-is-python3,ca-certificates \
        --customize-hook='printf "[global]\nbreak-system-packages = true\n" > "$1/etc/pip.conf"' \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
        bookworm dist/base-bookworm.tar.tmp "$MIRROR"
      mv dist/base-bookworm.tar.tmp dist/base-bookworm.tar
    fi
    ctr=$($BA from --pull=never scratch)
    $BA add "$ctr" dist/base-bookworm.tar /
    if [ -n "$CA_BUNDLE" ]; then
      # Behind a TLS-inspecting proxy pip needs the build host's CAs; Debian's pip reads the system bundle.
      # (also as a local CA, so an update-ca-certificates in a build step keeps it)
      $BA copy "$ctr" "$CA_BUNDLE" /etc/ssl/certs/ca-certificates.crt
      $BA copy "$ctr" "$CA_BUNDLE" /usr/local/share/ca-certificates/build-host.crt
    fi
    $BA config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd python3 "$ctr"
    $BA commit --rm "$ctr" "$BASE_REF"
  fi
  PULL=--pull=never
else
  BASE_REF="$BASE"
  PULL=--pull=missing
fi

$BA build --isolation chroot $PULL --layers=false --build-arg PYTHON_IMAGE="$BASE_REF" \
  -f Dockerfile -t "$IMAGE:$VERSION" .
rm -f "$OUT"
$BA push "$IMAGE:$VERSION" "oci-archive:$OUT:$IMAGE:$VERSION"
echo "make image: $OUT ($IMAGE:$VERSION, base $BASE_REF): $(du -m "$OUT" | cut -f1) MiB in $(( $(date +%s) - start )) s"
