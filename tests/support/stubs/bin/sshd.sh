# shellcheck shell=bash
# sshd -t [-f FILE]: the configuration's syntax (known keywords, yes/no values, one
# definition per Subsystem), Include globs followed; sshd -T: the values in effect, the first
# one read winning, as sshd does.
mode='' file=/etc/ssh/sshd_config
while [ $# -gt 0 ]; do
  case "$1" in -t) mode='test' ;; -T) mode=dump ;; -f) file=$2; shift ;; esac
  shift
done
declare -A first=() subsystems=()
bad=0
walk() {
  local f=$1 n=0 line key value inc
  while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1))
    line=${line#"${line%%[![:space:]]*}"}
    case "$line" in ''|'#'*) continue ;; esac
    key=${line%%[[:space:]]*}; value=${line#"$key"}; value=${value#"${value%%[![:space:]]*}"}
    key=${key,,}
    case "$key" in
      include)
        inc=$value; [ "${inc#/}" != "$inc" ] || inc=/etc/ssh/$inc
        for inc in $inc; do  # a glob, in name order
          if [ -f "$inc" ]; then walk "$inc"; fi
        done
        continue ;;
      passwordauthentication|kbdinteractiveauthentication|pubkeyauthentication|usepam|\
      x11forwarding|printmotd|challengeresponseauthentication)
        case "${value,,}" in yes|no) ;; *)
          echo "$f line $n: unsupported option \"$value\"." >&2; bad=$((bad + 1)); continue ;;
        esac ;;
      permitrootlogin)
        case "${value,,}" in yes|no|prohibit-password|without-password|forced-commands-only) ;; *)
          echo "$f line $n: unsupported option \"$value\"." >&2; bad=$((bad + 1)); continue ;;
        esac ;;
      subsystem)
        if [ -n "${subsystems[${value%% *}]-}" ]; then
          echo "$f line $n: Subsystem '${value%% *}' already defined." >&2; bad=$((bad + 1))
        fi
        subsystems[${value%% *}]=1 ;;
      port|listenaddress|hostkey|acceptenv|authorizedkeysfile|authenticationmethods|\
      allowusers|allowgroups|maxauthtries|logingracetime) ;;
      *) echo "$f: line $n: Bad configuration option: ${line%%[[:space:]]*}" >&2
         bad=$((bad + 1)); continue ;;
    esac
    [ -n "${first[$key]-}" ] || first[$key]=${value,,}
  done < "$f"
}
[ -f "$file" ] || { echo "sshd: $file: No such file or directory" >&2; exit 255; }
walk "$file"
if [ "$bad" -gt 0 ]; then
  echo "$file: terminating, $bad bad configuration options" >&2; exit 255
fi
if [ "$mode" = dump ]; then
  for key in passwordauthentication kbdinteractiveauthentication pubkeyauthentication \
      permitrootlogin usepam; do
    case "$key" in
      permitrootlogin) def=without-password ;; usepam) def=no ;; *) def=yes ;;
    esac
    printf '%s %s\n' "$key" "${first[$key]-$def}"
  done
fi
exit 0
