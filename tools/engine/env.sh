# shellcheck shell=bash
# The environment every run of the engine `make engine` builds needs. Source it from bash:
#   source tools/engine/env.sh
# It builds the engine or reuses the cache (tools/engine/build.sh; minutes the first time, no
# Go and no network afterwards) and exports:
#   PATH   the bin directory first: pulumi, pulumi-language-python(-exec) and the command and
#          kubernetes providers. The CLI takes a provider it finds on PATH before its plugin
#          cache, whatever version the program asks for (it warns "using pulumi-resource-… from
#          $PATH"; sdk/go/common/workspace/plugins.go, getPluginInfoAndPath), so requirements.in
#          pins each SDK to the version built here.
#   PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true   a plugin that is not there fails the run
#          instead of being downloaded
#   PULUMI_SKIP_UPDATE_CHECK=true   no request to api.pulumi.com for the newest CLI version
# With ENGINE_PLUGIN_CACHE=1 it also installs both providers into the plugin cache of
# $PULUMI_HOME (default ~/.pulumi; `pulumi plugin install resource <name> <version> -f <binary>`
# copies the file and downloads nothing) and exports PULUMI_IGNORE_AMBIENT_PLUGINS=true: the
# engine then runs the provider of exactly the version the SDK asks for or fails ("no resource
# plugin … found in the workspace at version …"), and `pulumi install`, which ignores PATH and
# downloads any plugin missing from the cache, has nothing left to download.
# Returns non-zero when the build fails.

engine_env() {
  local bin here name version cached
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)" || return 1
  bin="$(bash "$here/build.sh" | tail -1)" || return 1
  [ -x "$bin/pulumi" ] || { echo "engine: no pulumi in '$bin'" >&2; return 1; }
  export PATH="$bin:$PATH"
  export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true
  export PULUMI_SKIP_UPDATE_CHECK=true
  [ "${ENGINE_PLUGIN_CACHE:-}" = 1 ] || return 0
  for name in command kubernetes; do
    # The version is in the bin directory's name (…+command-v1.2.1+kubernetes-v4.25.0).
    version="${bin##*+"$name"-v}"
    version="${version%%+*}"
    cached="${PULUMI_HOME:-$HOME/.pulumi}/plugins/resource-$name-v$version/pulumi-resource-$name"
    cmp -s "$bin/pulumi-resource-$name" "$cached" && continue
    pulumi plugin install --reinstall resource "$name" "$version" -f "$bin/pulumi-resource-$name" >&2 ||
      return 1
  done
  export PULUMI_IGNORE_AMBIENT_PLUGINS=true
}

engine_env
