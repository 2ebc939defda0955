# shellcheck shell=bash
# ss -Htn state established '( sport = :22 )': the SSH clients in $S/ssh-clients (addresses,
# one a line; Sandbox.ssh_clients), as ss prints them.
[ -e "$S/ssh-clients" ] || exit 0
while read -r peer; do
  printf '0      0      10.10.0.1:22      %s:50022\n' "$peer"
done < "$S/ssh-clients"
