//! The OpenAPI 3.1 description of `/api`, served at `/api/openapi.json`: the documented,
//! stable shape tools can rely on, every answer the API gives included. Tests validate real
//! answers against it with a JSON-schema validator, and schemathesis fuzzes the server
//! with it.

use serde_json::{Value, json};

pub fn document() -> Value {
    let text = json!({"type": "string"});
    let nullable_text = json!({"type": ["string", "null"]});
    let time = json!({"type": "integer", "description": "Unix seconds"});
    let mut filters: Vec<Value> = ["repo", "author", "state", "cluster"]
        .map(|name| json!({"name": name, "in": "query", "required": false, "schema": {"type": "string"}}))
        .to_vec();
    filters.push(json!({"name": "limit", "in": "query", "required": false,
        "description": "previews per page; over the maximum is refused with 400",
        "schema": {"type": "integer", "minimum": 1, "maximum": crate::view::MAX_LIMIT, "default": crate::view::DEFAULT_LIMIT}}));
    filters.push(json!({"name": "cursor", "in": "query", "required": false,
        "description": "the `next` of the previous page (opaque: one this API did not give out is refused with 400)",
        "schema": {"type": "string"}}));
    let error = |description: &str| json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}});
    let refusals = |bad_request: &str| {
        json!({
            "400": error(bad_request),
            "401": error("api.token is set and the request did not carry it"),
            "421": error("a Host other than this machine's (or public_url's) on a loopback listen: DNS rebinding"),
            "503": {"description": "the state could not be read, or stayed busy past the busy timeout (then retry after the Retry-After seconds)",
                "headers": {"Retry-After": {"required": false, "schema": {"type": "integer"}}},
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
        })
    };
    let responses = |bad_request: &str, answers: Value| {
        let mut all = refusals(bad_request);
        for (status, answer) in answers.as_object().into_iter().flatten() {
            all[status] = answer.clone();
        }
        all
    };
    let bad_path = "a number that is not a pull request's (1 to 4294967295)";
    let bearer_only =
        "the request did not carry api.token as a bearer token (Basic credentials are not enough)";
    // Its own value: the whole document in one `json!` passes the macro's recursion limit.
    let cost = json!({
        "type": "object",
        "additionalProperties": false,
        "description": "what the preview namespace's ResourceQuota last counted while awake (null until counted), and what sleeping saved",
        "required": ["pods", "cpu_millis", "memory_bytes", "slept_seconds", "pod_seconds_saved"],
        "properties": {
            "pods": {"type": ["integer", "null"], "minimum": 0},
            "cpu_millis": {"type": ["integer", "null"], "minimum": 0, "description": "CPU requested, in thousandths of a core"},
            "memory_bytes": {"type": ["integer", "null"], "minimum": 0, "description": "memory requested, in bytes"},
            "slept_seconds": {"type": "integer", "minimum": 0},
            "pod_seconds_saved": {"type": "integer", "minimum": 0, "description": "pods kept from running while asleep, times their seconds"},
        },
    });
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "previewd API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Preview environments previewd tracks, with what each provisioned (the ledger) and what happened to it (the history, kept after the preview is destroyed). With api.token set, every request needs `Authorization: Bearer <token>`.",
        },
        "components": {
            "securitySchemes": {"token": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Preview": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["repo", "number", "pr_url", "title", "author", "state", "desired", "observed", "url", "cluster", "head_sha", "created_at", "expires_at", "seconds_left", "keep", "fork", "last_error", "end_reason", "waiting_since", "sleeping_since", "last_used_at", "cost"],
                    "properties": {
                        "repo": {"type": "string", "description": "owner/name, lower-case"},
                        "number": {"type": "integer"},
                        "pr_url": text,
                        "title": text,
                        "author": text,
                        "state": {"enum": ["queued", "awaiting_approval", "draft", "opted_out", "waiting_for_ci", "ci_failed", "deploying", "rendered", "ready", "sleeping", "failed", "tearing_down", "destroyed"]},
                        "desired": {"enum": ["deployed", "awaiting_approval", "draft", "opted_out", "absent"]},
                        "observed": text,
                        "url": text,
                        "cluster": nullable_text,
                        "head_sha": text,
                        "created_at": time,
                        "expires_at": time,
                        "seconds_left": {"type": "integer", "minimum": 0},
                        "keep": {"type": "boolean"},
                        "fork": {"type": "boolean"},
                        "last_error": nullable_text,
                        "end_reason": nullable_text,
                        "waiting_since": {"type": ["integer", "null"], "description": "waiting for CI (wait_for) on the head since then (Unix seconds)"},
                        "sleeping_since": {"type": ["integer", "null"], "description": "asleep since then (Unix seconds): its app runs no pod until a request or /preview wake wakes it"},
                        "last_used_at": {"type": ["integer", "null"], "description": "the last request the login let through (Unix seconds, recorded at most once a minute)"},
                        "cost": cost,
                    },
                },
                "LedgerItem": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["kind", "namespace", "name", "state", "detail"],
                    "properties": {
                        "kind": text, "namespace": text, "name": text,
                        "state": {"enum": ["applied", "confirmed", "deleting", "gone", "kept"]},
                        "detail": nullable_text,
                    },
                },
                "HistoryEntry": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["at", "what", "actor", "reason", "head_sha"],
                    "properties": {"at": time, "what": text, "actor": text, "reason": text, "head_sha": nullable_text},
                },
                "Template": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["repo", "generation", "state", "base_sha", "cluster", "database", "created_at", "ready_at", "age_seconds", "size_bytes", "message"],
                    "properties": {
                        "repo": text,
                        "generation": {"type": "integer", "minimum": 1},
                        "state": {"enum": ["building", "ready", "failed", "retiring"]},
                        "base_sha": text,
                        "cluster": text,
                        "database": text,
                        "created_at": time,
                        "ready_at": {"type": ["integer", "null"]},
                        "age_seconds": {"type": "integer", "minimum": 0},
                        "size_bytes": {"type": ["integer", "null"], "minimum": 0,
                            "description": "the database's size on its server, as the generation's size Job reported it; null until then (or without public_url)"},
                        "message": nullable_text,
                    },
                },
                "ShareItem": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["created_by", "created_at", "expires_at"],
                    "description": "a valid share link, without the link",
                    "properties": {"created_by": {"type": "string", "description": "the writer's login, or `api`"}, "created_at": time, "expires_at": time},
                },
                "ShareLink": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["link", "created_by", "created_at", "expires_at"],
                    "properties": {
                        "link": {"type": "string", "description": "the share link: whoever holds it opens the preview until it expires or is revoked"},
                        "created_by": {"type": "string"},
                        "created_at": time,
                        "expires_at": time,
                    },
                },
                "Error": {"type": "object", "additionalProperties": false, "required": ["error"], "properties": {"error": text}},
                "Destroying": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["destroying"],
                    "properties": {"destroying": {"const": true}, "detail": text},
                },
            },
        },
        "security": [{"token": []}],
        "paths": {
            "/api/previews": {
                "get": {
                    "summary": "Tracked previews",
                    "parameters": filters,
                    "responses": responses("a limit out of range, a cursor this API did not give out, or a query it cannot read", json!({
                        "200": {"description": "a page of previews, by repository and number (with `state`, a page can hold fewer than `limit`: follow `next` until it is null)", "content": {"application/json": {"schema": {
                            "type": "object", "additionalProperties": false, "required": ["previews", "next"],
                            "properties": {
                                "previews": {"type": "array", "items": {"$ref": "#/components/schemas/Preview"}},
                                "next": {"type": ["string", "null"], "description": "the cursor of the next page; null on the last"},
                            },
                        }}}},
                    })),
                },
            },
            "/api/previews/{owner}/{repo}/{number}": {
                "get": {
                    "summary": format!("One preview with its ledger and its newest history (at most {} entries, oldest first; preview is null once destroyed; a PR's history is kept {} days after it was last active without a preview)", crate::db::HISTORY_SHOWN, crate::sweep::RETENTION / 86_400),
                    "parameters": path_parameters(),
                    "responses": responses(bad_path, json!({
                        "200": {"description": "the preview", "content": {"application/json": {"schema": {
                            "type": "object", "additionalProperties": false, "required": ["preview", "ledger", "history", "shares"],
                            "properties": {
                                "preview": {"oneOf": [{"$ref": "#/components/schemas/Preview"}, {"type": "null"}]},
                                "ledger": {"type": "array", "items": {"$ref": "#/components/schemas/LedgerItem"}},
                                "history": {"type": "array", "items": {"$ref": "#/components/schemas/HistoryEntry"}},
                                "shares": {"type": "array", "items": {"$ref": "#/components/schemas/ShareItem"}, "description": "the preview's valid share links, newest first (never the links: GET .../shares gives them)"},
                            },
                        }}}},
                        "404": error("previewd never knew this pull request"),
                    })),
                },
            },
            "/api/templates": {
                "get": {
                    "summary": "Template databases (database_template): every generation of every repository, newest first per repository (at most 1,000)",
                    "responses": responses("a query it cannot read", json!({
                        "200": {"description": "the generations", "content": {"application/json": {"schema": {
                            "type": "object", "additionalProperties": false, "required": ["templates"],
                            "properties": {"templates": {"type": "array", "items": {"$ref": "#/components/schemas/Template"}}},
                        }}}},
                    })),
                },
            },
            "/api/templates/{owner}/{repo}/{generation}/size": {
                "post": {
                    "summary": "A template generation's size Job reports the size it measured (needs the generation's own report token, not api.token)",
                    "security": [],
                    "parameters": [
                        {"name": "owner", "in": "path", "required": true, "schema": {"type": "string"}},
                        {"name": "repo", "in": "path", "required": true, "schema": {"type": "string"}},
                        {"name": "generation", "in": "path", "required": true, "schema": {"type": "integer", "minimum": 1, "maximum": u32::MAX}},
                    ],
                    "requestBody": {"required": true, "content": {"application/json": {"schema": {
                        "type": "object", "additionalProperties": false, "required": ["token", "bytes"],
                        "properties": {
                            "token": {"type": "string", "description": "the TOKEN of the generation's report Secret"},
                            "bytes": {"type": "integer", "minimum": 0, "maximum": 1_i64 << 53},
                        },
                    }}}},
                    "responses": {
                        "204": {"description": "recorded"},
                        "400": error("a generation that is no number, or a body that is not a size report"),
                        "401": error("the token is not this generation's, or previewd builds no such generation"),
                        "408": error("the body did not arrive within 30 s"),
                        "413": error("a body over 1,024 bytes"),
                        "503": {"description": "the state could not be written (retry after the Retry-After seconds)",
                            "headers": {"Retry-After": {"required": false, "schema": {"type": "integer"}}},
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                    },
                },
            },
            "/api/previews/{owner}/{repo}/{number}/destroy": {
                "post": {
                    "summary": "Tear the preview down (always needs the token)",
                    "parameters": path_parameters(),
                    "responses": responses(bad_path, json!({
                        "202": {"description": "teardown recorded; the reconciler carries it out", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Destroying"}}}},
                        "200": {"description": "already ending", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Destroying"}}}},
                        "401": error("the request did not carry api.token as a bearer token (Basic credentials are not enough)"),
                        "403": error("api.token is not set, so nobody may destroy through the API"),
                        "404": error("no live or ending preview of this pull request"),
                    })),
                },
            },
            "/api/previews/{owner}/{repo}/{number}/share": {
                "post": {
                    "summary": format!("Make a share link to the preview: a pass that opens it without signing in (always needs the token, as a bearer token). It lasts `for` (default 24h), at most 7 days and never past the preview's expiry; a preview has at most {} valid ones", crate::db::login::MAX_SHARES),
                    "parameters": share_parameters(),
                    "responses": responses(&format!("{bad_path}, or a `for` that is no duration"), json!({
                        "201": {"description": "the link and when it expires (not cached: the link is a pass)",
                            "headers": {"Cache-Control": {"required": true, "schema": {"const": "no-store"}}},
                            "content": {"application/json": {"schema": {
                            "type": "object", "additionalProperties": false, "required": ["link", "expires_at"],
                            "properties": {"link": {"type": "string"}, "expires_at": time},
                        }}}},
                        "401": error(bearer_only),
                        "403": error("api.token is not set, so nobody may make share links through the API"),
                        "404": error("previewd has no preview of this pull request"),
                        "409": error("the preview is ending or due to end now, or already has the most valid share links"),
                    })),
                },
            },
            "/api/previews/{owner}/{repo}/{number}/unshare": {
                "post": {
                    "summary": "Revoke every share link of the preview, as `/preview unshare` does (always needs the token, as a bearer token)",
                    "parameters": path_parameters(),
                    "responses": responses(bad_path, json!({
                        "200": {"description": "how many valid links were revoked", "content": {"application/json": {"schema": {
                            "type": "object", "additionalProperties": false, "required": ["revoked"],
                            "properties": {"revoked": {"type": "integer", "minimum": 0}},
                        }}}},
                        "401": error(bearer_only),
                        "403": error("api.token is not set, so nobody may revoke share links through the API"),
                        "404": error("previewd has no preview of this pull request"),
                    })),
                },
            },
            "/api/previews/{owner}/{repo}/{number}/shares": {
                "get": {
                    "summary": "The preview's valid share links, with the links, newest first (always needs the token, as a bearer token): where a writer gets the link a `/preview share` made",
                    "parameters": path_parameters(),
                    "responses": responses(bad_path, json!({
                        "200": {"description": "the links (not cached: each is a pass)",
                            "headers": {"Cache-Control": {"required": true, "schema": {"const": "no-store"}}},
                            "content": {"application/json": {"schema": {
                            "type": "object", "additionalProperties": false, "required": ["shares"],
                            "properties": {"shares": {"type": "array", "items": {"$ref": "#/components/schemas/ShareLink"}}},
                        }}}},
                        "401": error(bearer_only),
                        "403": error("api.token is not set, so nobody may read share links through the API"),
                        "404": error("previewd has no preview of this pull request"),
                    })),
                },
            },
        },
    })
}

/// The path's parameters and a share's `for`.
fn share_parameters() -> Value {
    let mut parameters = path_parameters();
    if let Some(list) = parameters.as_array_mut() {
        list.push(json!({"name": "for", "in": "query", "required": false,
            "description": "how long the link lasts, like `24h`, `2d` or `1w` (more than zero)",
            "schema": {"type": "string", "default": "24h"}}));
    }
    parameters
}

fn path_parameters() -> Value {
    json!([
        {"name": "owner", "in": "path", "required": true, "schema": {"type": "string"}},
        {"name": "repo", "in": "path", "required": true, "schema": {"type": "string"}},
        {"name": "number", "in": "path", "required": true, "schema": {"type": "integer", "minimum": 1, "maximum": u32::MAX}},
    ])
}
