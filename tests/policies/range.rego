package codemode.authz

# Sized by an argument the agent chooses: numbers.range(1, 2000000000) once asked
# for 48 GB at once and aborted the server. Now a policy failure, which denies.
allow if {
    count(numbers.range(1, input.arguments.limit)) >= 0
}
