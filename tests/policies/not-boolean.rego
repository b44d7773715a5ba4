# A decision that is a string, not a boolean: every call is a policy failure.
package codemode.authz

allow := "yes"
