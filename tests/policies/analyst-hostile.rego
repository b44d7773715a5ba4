# A second module of the same package: analysts may also call hostile.crash, so the
# tests can check that a plugin's trap message never reaches a client.
package codemode.authz

allow if {
	input.subject.id == "analyst"
	input.capability.name == "hostile.crash"
}
