#!/usr/bin/env bash
# Parse "--name value" / "--name=value" options into shell variables of the sourcing script.
#
#   stage=0; num_nodes=1; dir="exp/my run"
#   . tools/parse_options.sh || exit 1
#
# Only variables the caller has already declared can be set ("--dir x" needs "dir=...");
# dashes become underscores ("--stop-stage 3" sets stop_stage).  An unknown option, a
# missing value or "--help" prints the variables the script accepts and returns 1.
# Values are assigned verbatim (spaces kept, nothing evaluated).  Positional arguments
# after the options are left in "$@".

__parse_options_usage() {
  echo "usage: $0 [--option value ...]" >&2
  echo "options (current values):" >&2
  local name
  for name in $(compgen -v); do
    case "$name" in _*|BASH*|[A-Z]*|FUNCNAME|GROUPS|PIPESTATUS|OPTARG|OPTIND|OPTERR) continue ;; esac
    printf '  --%s %q\n' "$name" "${!name}" >&2
  done
}

while [ $# -gt 0 ]; do
  case "$1" in
    --help|-h) __parse_options_usage; return 1 2>/dev/null || exit 1 ;;
    --*=*) __po_name="${1%%=*}"; __po_value="${1#*=}"; shift ;;
    --*)
      __po_name="$1"
      if [ $# -lt 2 ]; then echo "$0: option $1 needs a value" >&2; return 1 2>/dev/null || exit 1; fi
      __po_value="$2"; shift 2 ;;
    *) break ;;
  esac
  __po_name="${__po_name#--}"; __po_name="${__po_name//-/_}"
  if ! [[ "$__po_name" =~ ^[a-zA-Z][a-zA-Z0-9_]*$ ]] || [ -z "${!__po_name+set}" ]; then
    echo "$0: unknown option --${__po_name} (run with --help for the list)" >&2
    return 1 2>/dev/null || exit 1
  fi
  printf -v "$__po_name" '%s' "$__po_value"
done
unset __po_name __po_value
true
