# The authorize-invocation decision of bench/authorize.ts's policy, written for OPA's REST
# server (POST /v1/data/authority/allow, {"input": {...}}): the bench's peer. It makes the
# same allow/deny as POST /v1/authorize-invocation on bench/lib/opa.ts's decision set, which
# the bench checks before it measures (and test/bench/opa.test.ts in `make test`).
#
# input: the authorize-invocation body ({"subject": {"subject_id"}, "capability_id", "method",
# "path"}) and the caller's bearer token as "token"
# data.idp: {"jwks", "issuer", "audience"}: the token's issuer, as the authority verifies it
# data.catalog[capability_id]: [{"method", "path"}]: the capability's operations (templates)
# data.policies[subject_id][capability_id]: ["<capability>:<method>:<path template>", ...]
package authority

default allow := false

# A token verified as the authority verifies one: a signature by a key of the issuer's JWKS,
# the issuer, the audience, and its time claims (decode_verify checks exp and nbf).
claims := payload if {
	[valid, _, payload] := io.jwt.decode_verify(input.token, {
		"cert": data.idp.jwks,
		"iss": data.idp.issuer,
		"aud": data.idp.audience,
	})
	valid
}

# The token's subject is authoritative: a body subject_id, when sent, must equal it.
subject := claims.sub if {
	object.get(input, ["subject", "subject_id"], claims.sub) == claims.sub
}

operations := data.catalog[input.capability_id]

# The method's operations; a literal path wins over a template that also matches it
# (GET /users/me over GET /users/{id}).
literal contains op if {
	some op in operations
	op.method == input.method
	op.path == input.path
}

templated contains op if {
	count(literal) == 0
	some op in operations
	op.method == input.method
	template_matches(op.path, input.path)
}

template_matches(template, path) if {
	wanted := split(template, "/")
	given := split(path, "/")
	count(wanted) == count(given)
	every i, segment in wanted {
		segment_matches(segment, given[i])
	}
}

segment_matches(segment, value) if segment == value

segment_matches(segment, value) if {
	startswith(segment, "{")
	endswith(segment, "}")
	value != ""
}

matched := literal | templated

# An operation of the catalog for this method and path, in the subject's allowlist for the capability.
allow if {
	some op in matched
	permission := sprintf("%s:%s:%s", [input.capability_id, lower(op.method), op.path])
	permission in data.policies[subject][input.capability_id]
}
