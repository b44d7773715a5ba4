package codemode.authz

# The soak's policy: every call is allowed, but one that passes `limit` makes the
# policy build numbers.range(1, limit) first. An agent choosing limit=2000000000
# once made that allocate 48 GB and abort the server; it must stay a policy
# failure (which denies) while everything else goes on.
allow if {
    not input.arguments.limit
}

allow if {
    count(numbers.range(1, input.arguments.limit)) >= 0
}
