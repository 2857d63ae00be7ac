"""A member cluster, as the controller knows it.

`client`: `Member`, one member's API client, cluster ID and write counts (`MemberClient`, what
the writes use of it); `view`: `MemberView`, what a reconcile reads of one member;
`directory`: the --members-dir files (one kubeconfig each, as `mcsdns join` puts them in the
members Secret: mcsdns.members) and their changes; `live`: those changes applied to the
running Manager (a member joins, reloads or leaves)."""
