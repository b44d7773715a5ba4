# The end-to-end tests' policy: analysts may look books up, nobody may do anything
# else. The reasons are never evaluated for a decision and must never reach a client.
package codemode.authz

default allow := false

allow if {
	input.subject.id == "analyst"
	input.capability.name == "records.lookup"
}

reasons contains "CANARY-policy-7f3a9c: guests may not look books up" if {
	input.subject.id == "guest"
}
