#!/bin/sh
# `make release`: every artifact a user installs carve from, versioned, into $DIST (default dist/):
#   carve-<v>.oci.tar                     the image (hack/build_image.sh: buildah, the real builder of `make image`)
#   carve-<v>.tgz                         the Helm chart (`helm package`), its values schema first checked
#                                         against the plugin's own validation (hack/values_schema.py)
#   carve-<v>-py3-none-linux_<arch>.whl   the CLI (`carve`, `kubectl carve`) with the native build inside
#                                         (driver/_native: limiter, CDI hook, fake GPU libraries) and the
#                                         DeviceClasses (driver/_deviceclasses), so it runs without the repository
#   carve-<v>.sha256                      sha256sum of the three (`sha256sum -c carve-<v>.sha256`)
# The version is pyproject.toml's; the chart's version and appVersion must equal it.
# SKIP_IMAGE=1 leaves the image out (the tests of this script: the image build takes ~10 minutes).
set -eu
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
HELM="${HELM:-.tools/helm}"
DIST="${DIST:-dist}"
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -n1)"
start=$(date +%s)
mkdir -p "$DIST"
DIST="$(cd "$DIST" && pwd)"

chart_version="$(sed -n 's/^version: *//p' helm/carve/Chart.yaml)"
chart_app="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' helm/carve/Chart.yaml)"
if [ "$chart_version" != "$VERSION" ] || [ "$chart_app" != "$VERSION" ]; then
  echo "make release: helm/carve/Chart.yaml has version $chart_version, appVersion $chart_app; pyproject.toml $VERSION" >&2
  exit 2
fi
for f in libcarve-limiter.so carve-cdi-hook carve-ldconfig fakes/libnvidia-ml.so.1 fakes/libcuda.so.1 \
         fakes/nvidia-cuda-mps-control; do
  [ -f "native/build/$f" ] || { echo "make release: native/build/$f is missing: run make native" >&2; exit 2; }
done

# 1. The chart: schema checked against the plugin, linted, packaged.
"$PY" hack/values_schema.py
"$HELM" lint --strict helm/carve >/dev/null
"$HELM" package helm/carve --destination "$DIST" >/dev/null
CHART="carve-$VERSION.tgz"

# 2. The wheel, built from a copy of the tracked sources with the native build and DeviceClasses added.
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
git ls-files -z pyproject.toml README.md api driver | xargs -0 cp --parents -t "$stage"
mkdir -p "$stage/driver/_native/fakes" "$stage/driver/_deviceclasses"
cp native/build/libcarve-limiter.so native/build/carve-cdi-hook native/build/carve-ldconfig "$stage/driver/_native/"
cp native/build/fakes/libnvidia-ml.so.1 native/build/fakes/libcuda.so.1 native/build/fakes/nvidia-cuda-mps-control \
  "$stage/driver/_native/fakes/"
cp deviceclasses/*.yaml "$stage/driver/_deviceclasses/"
# Native code inside: a platform wheel (linux_<arch>: built against this machine's glibc, the hook static).
printf '[bdist_wheel]\nplat_name = linux_%s\n' "$(uname -m)" > "$stage/setup.cfg"
"$PY" -m pip wheel -q --disable-pip-version-check --no-deps --wheel-dir "$DIST" "$stage"
WHEEL="carve-$VERSION-py3-none-linux_$(uname -m).whl"
[ -f "$DIST/$WHEEL" ] || { echo "make release: pip built no $DIST/$WHEEL" >&2; exit 1; }

# 3. The image.
IMAGE_TAR=""
if [ -z "${SKIP_IMAGE:-}" ]; then
  VERSION="$VERSION" ./hack/build_image.sh
  IMAGE_TAR="carve-$VERSION.oci.tar"
  [ "$DIST" = "$(pwd)/dist" ] || cp "dist/$IMAGE_TAR" "$DIST/"
fi

# 4. Checksums.
(cd "$DIST" && sha256sum $IMAGE_TAR "$CHART" "$WHEEL" > "carve-$VERSION.sha256")
echo "make release: $DIST (carve $VERSION) in $(( $(date +%s) - start )) s:"
(cd "$DIST" && ls -l $IMAGE_TAR "$CHART" "$WHEEL" "carve-$VERSION.sha256" | awk '{print "  " $5 "\t" $9}')
