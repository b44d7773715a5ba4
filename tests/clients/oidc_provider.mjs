// A real OAuth 2.0 / OpenID Connect authorization server for the tests: npm
// `oidc-provider`, on 127.0.0.1 at a port of the system's choosing.
//
// Takes {"modules": NODE_MODULES, "resource": "http://127.0.0.1:PORT/mcp"} as
// its argument, and optionally "port" (else one of the system's choosing) and
// "stay": true (keep serving when stdin closes, until SIGTERM or Ctrl-C: what a
// shell's `&` gives a command). Its clients use the client credentials grant (`sub` the client's
// ID) or, registered dynamically (RFC 7591) as MCP clients do, the authorization
// code grant with PKCE, through its development login and consent pages (any
// login name is a user: `sub`). Every access token is a JWT (the resource's
// audience, living 10 min, 1 s for a resource whose URL contains "short";
// audience, the scopes asked for, `groups` from the table below) signed with
// ES256. Prints one line
// {"issuer": "http://127.0.0.1:PORT"} once it serves. A line "rotate" on stdin
// puts a new signing key in front of the old one (both published); it answers
// {"rotated": KID} when it serves with it.
//
// Token exchange (RFC 8693) is a grant of its own here (oidc-provider has none
// built in): the client `codemode` (secret `codemode-secret`, HTTP Basic)
// trades an access token of this issuer for one whose audience is one of
// "audiences" in the argument (another is `invalid_target`): the same `sub`,
// scope and groups, `act.sub` the client. A line "exchanges" on stdin answers
// {"exchanges": N}, how many were made; a line "jwks" answers {"jwks": N}, how
// many times its keys were fetched.
import { createServer } from "node:http";
import { generateKeyPairSync, randomUUID } from "node:crypto";
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";

const input = JSON.parse(process.argv[2]);
const { default: Provider } = await import(
  pathToFileURL(`${input.modules}/oidc-provider/lib/index.js`).href
);
const jose = await import(pathToFileURL(`${input.modules}/jose/dist/webapi/index.js`).href);
const EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange";
const ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token";
const AUDIENCES = input.audiences ?? [];
let exchanges = 0;

const GROUPS = { alice: ["admins"], bob: ["users"] };
const SCOPES = ["mcp:execute", "mcp:admin"];

const key = (type, options) => {
  const jwk = generateKeyPairSync(type, options).privateKey.export({ format: "jwk" });
  return { ...jwk, kid: randomUUID(), use: "sig" };
};
// oidc-provider signs ID tokens with RS256: it needs an RSA key too.
const rsa = key("rsa", { modulusLength: 2048 });
let keys = [key("ec", { namedCurve: "P-256" }), rsa];

const server = createServer();
await new Promise((resolve) => server.listen(input.port ?? 0, "127.0.0.1", resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

// How long a token lives: 1 s for a resource whose URL contains "short".
const lifetime = (ctx, token) =>
  [token.aud, token.resourceServer?.audience]
    .flat()
    .some((audience) => typeof audience === "string" && audience.includes("short"))
    ? 1
    : 600;

// The public half of a key of `keys`.
const publicKey = ({ d, p, q, dp, dq, qi, ...rest }) => rest;

// The token exchange grant: verifies the subject token as a resource server
// would, and signs the new token with the current EC key.
const exchange = async (ctx) => {
  const { subject_token: token, subject_token_type: type, audience } = ctx.oidc.params;
  const fail = (error) => {
    ctx.status = 400;
    ctx.body = { error };
  };
  if (type !== ACCESS_TOKEN || !token) return fail("invalid_request");
  if (!AUDIENCES.includes(audience)) return fail("invalid_target");
  let payload;
  try {
    const jwks = jose.createLocalJWKSet({ keys: keys.map(publicKey) });
    ({ payload } = await jose.jwtVerify(token, jwks, { issuer }));
  } catch {
    return fail("invalid_grant");
  }
  const signing = keys.find((k) => k.kty === "EC");
  const now = Math.floor(Date.now() / 1000);
  const client = ctx.oidc.client.clientId;
  const exchanged = await new jose.SignJWT({
    scope: payload.scope,
    groups: payload.groups,
    client_id: client,
    act: { sub: client },
  })
    .setProtectedHeader({ alg: "ES256", kid: signing.kid, typ: "at+jwt" })
    .setIssuer(issuer)
    .setSubject(payload.sub)
    .setAudience(audience)
    .setIssuedAt(now)
    .setExpirationTime(now + 300)
    .setJti(randomUUID())
    .sign(await jose.importJWK(signing, "ES256"));
  exchanges += 1;
  ctx.body = {
    access_token: exchanged,
    issued_token_type: ACCESS_TOKEN,
    token_type: "Bearer",
    expires_in: 300,
  };
};

const provider = (jwks) => {
  const made = new Provider(issuer, {
    jwks: { keys: jwks },
    clients: [
      ...Object.keys(GROUPS).map((name) => ({
        client_id: name,
        client_secret: `${name}-secret`,
        grant_types: ["client_credentials"],
        redirect_uris: [],
        response_types: [],
        token_endpoint_auth_method: "client_secret_post",
        scope: SCOPES.join(" "),
      })),
      {
        client_id: "codemode",
        client_secret: "codemode-secret",
        grant_types: [EXCHANGE],
        redirect_uris: [],
        response_types: [],
        token_endpoint_auth_method: "client_secret_basic",
      },
    ],
    scopes: SCOPES,
    ttl: { ClientCredentials: lifetime, AccessToken: lifetime },
    features: {
      devInteractions: { enabled: true },
      registration: { enabled: true },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => input.resource,
        useGrantedResource: () => true,
        getResourceServerInfo: (ctx, resource) => ({
          scope: SCOPES.join(" "),
          audience: resource,
          // A resource named "...short..." gets tokens that live 1 s.
          accessTokenTTL: resource.includes("short") ? 1 : 600,
          accessTokenFormat: "jwt",
          jwt: { sign: { alg: "ES256" } },
        }),
      },
    },
    extraTokenClaims: (ctx, token) => ({
      groups: GROUPS[token.accountId ?? token.clientId] ?? [],
    }),
  });
  made.registerGrantType(EXCHANGE, exchange, [
    "subject_token",
    "subject_token_type",
    "audience",
    "requested_token_type",
  ]);
  return made;
};

let handler = provider(keys).callback();
let jwksServed = 0;
server.on("request", (request, response) => {
  if (request.url === "/jwks" || request.url?.startsWith("/jwks?")) {
    jwksServed += 1;
  }
  handler(request, response);
});
process.stdout.write(`${JSON.stringify({ issuer })}\n`);

for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() === "exchanges") {
    process.stdout.write(`${JSON.stringify({ exchanges })}\n`);
  }
  if (line.trim() === "jwks") {
    process.stdout.write(`${JSON.stringify({ jwks: jwksServed })}\n`);
  }
  if (line.trim() === "rotate") {
    const fresh = key("ec", { namedCurve: "P-256" });
    keys = [fresh, ...keys];
    handler = provider(keys).callback();
    process.stdout.write(`${JSON.stringify({ rotated: fresh.kid })}\n`);
  }
}
// stdin closed: the test is over, unless asked to stay.
if (!input.stay) {
  process.exit(0);
}
