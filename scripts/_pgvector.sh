# Run by .ci/run (beside the virtualenv's install) and by test.sh when DATABASE_URL names the local
# PostgreSQL: pgvector in the PostgreSQL server on 127.0.0.1:5432, when it has none. The tests of
# the knowledge base's vectors run the real extension there (docs/knowledge.md#vectors-optional).
#
# Debian 12 packages no pgvector for its PostgreSQL 15 (PGDG's repository is not reachable from
# here), so it is built the way Debian builds it: Debian's own source package (the one behind
# trixie's postgresql-17-pgvector, its patches applied by dpkg-source; apt checks it against the
# archive's signed index) against the running server's headers (postgresql-server-dev-NN). About
# 15 s on a fresh machine, nothing once installed.
set -euo pipefail
SOURCE_SUITE="trixie"  # the Debian release whose pgvector source package is built

major="$(psql -h 127.0.0.1 -U postgres -Atc 'SHOW server_version_num' 2>/dev/null | cut -c1-2 || true)"
if [ -z "$major" ]; then
  echo "No PostgreSQL answers on 127.0.0.1:5432: pgvector not checked" >&2
  exit 0
fi
if [ -f "/usr/share/postgresql/$major/extension/vector.control" ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "PostgreSQL $major has no pgvector: install postgresql-$major-pgvector (docs/knowledge.md#vectors-optional)" >&2
  exit 0  # the vector tests on PostgreSQL then fail, saying so
fi
echo "Building pgvector for PostgreSQL $major from Debian's source package (docs/knowledge.md)…"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
quiet() {  # its output only when it fails
  local out
  out="$("$@" 2>&1)" || { echo "$out" >&2; echo "failed: $*" >&2; return 1; }
}
quiet apt-get update -qq
DEBIAN_FRONTEND=noninteractive quiet apt-get install -y -qq --no-install-recommends "postgresql-server-dev-$major" dpkg-dev
# A private source list and state: the machine's own apt configuration is left as it was.
mkdir -p "$work/lists/partial" "$work/cache" "$work/build"
# The same Debian mirror the machine installs its packages from (its main release's address).
codename="$(. /etc/os-release && echo "$VERSION_CODENAME")"
mirror="$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 'Created-By: Packages' | awk -v r="$codename" '$2 == r {print $1; exit}')"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $SOURCE_SUITE main" > "$work/sources.list"
apt_private=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
             -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)
quiet apt-get "${apt_private[@]}" update -qq
(cd "$work/build" && quiet apt-get "${apt_private[@]}" source --download-only -qq pgvector)
# apt checked the files against the archive's signed index; the .dsc's own signature would need debian-keyring.
quiet dpkg-source --no-check -x "$work"/build/pgvector_*.dsc "$work/src"
pgxs=(USE_PGXS=1 PG_CONFIG="/usr/lib/postgresql/$major/bin/pg_config" with_llvm=no)
quiet make -C "$work/src" -j"$(nproc)" "${pgxs[@]}"
quiet make -C "$work/src" install "${pgxs[@]}"
echo "pgvector $(sed -n "s/^default_version = '\(.*\)'/\1/p" "/usr/share/postgresql/$major/extension/vector.control") installed for PostgreSQL $major"
