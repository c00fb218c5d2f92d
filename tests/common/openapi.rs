//! The served OpenAPI document as a contract: real answers validated against it with a
//! JSON-schema validator.

use serde_json::Value;

use super::TestApp;

/// The served OpenAPI document.
pub async fn openapi(app: &TestApp) -> Value {
    let (status, body) = app.get("/api/openapi.json", None).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// Asserts that `body`, the answer `status` to `method` on the path template `path`, is one
/// the document lists and matches its schema: a real JSON-schema validator (draft 2020-12,
/// OpenAPI 3.1's dialect), so types, enums, nulls and extra keys all count.
pub fn documented(openapi: &Value, method: &str, path: &str, status: u16, body: &str) {
    let answer = &openapi["paths"][path][method]["responses"][status.to_string()];
    assert!(
        answer.is_object(),
        "{method} {path} answered {status}, which the document does not list: {body}"
    );
    let Some(schema) = answer["content"]["application/json"]["schema"].as_object() else {
        panic!("{method} {path} {status}: the document gives no JSON schema for the answer {body}");
    };
    // The schema's `$ref`s point into the document's components.
    let mut schema = Value::Object(schema.clone());
    schema["components"] = openapi["components"].clone();
    let validator = jsonschema::draft202012::new(&schema).expect("a valid JSON schema");
    let instance: Value = serde_json::from_str(body)
        .unwrap_or_else(|e| panic!("{method} {path} {status}: not JSON ({e}): {body}"));
    let errors: Vec<String> = validator
        .iter_errors(&instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{method} {path} {status}: {errors:?} in {body}"
    );
}

/// `GET path`, its answer checked against the document under `template`; the body.
pub async fn get_documented(
    app: &TestApp,
    openapi: &Value,
    template: &str,
    path: &str,
    auth: Option<&str>,
    status: u16,
) -> Value {
    let (answered, body) = app.get(path, auth).await;
    assert_eq!(answered, status, "{path}: {body}");
    documented(openapi, "get", template, status, &body);
    serde_json::from_str(&body).unwrap()
}
