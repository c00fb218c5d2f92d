//! A preview's sealed secrets as the state keeps them: sealed values and public ones, each
//! with the certificate it was sealed for (a secret's plaintext never gets here).

use rusqlite::params;

use super::State;

/// The sealed values stored for a preview, with the certificate they were sealed for. A row
/// that cannot be read makes the whole set empty, so that it is sealed anew rather than
/// rendered with a Secret missing.
pub async fn sealed_secrets(
    state: &State,
    id: i64,
) -> anyhow::Result<Vec<(crate::render::SealedSecret, String)>> {
    if let Some(pg) = state.postgres() {
        return super::pg::secrets::sealed_secrets(pg, id).await;
    }
    let db = state.inline();
    let rows: Vec<(String, String, String, String, String)> = db.read(|conn| {
        conn.prepare_cached(
            "SELECT namespace, name, scope, cert_fingerprint, encrypted_data
             FROM sealed_secrets WHERE preview_id = ?1 ORDER BY id",
        )?
        .query_map(params![id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect()
    })?;
    let secrets: Option<Vec<_>> = rows
        .into_iter()
        .map(|(namespace, name, scope, fingerprint, stored)| {
            let secret = stored_secret(name, namespace, &scope, &stored)?;
            Some((secret, fingerprint))
        })
        .collect();
    Ok(secrets.unwrap_or_default())
}

/// A sealed secret as `sealed_secrets` and `template_secrets` store it; `None` when the row
/// cannot be read (the caller then seals anew rather than render a Secret missing).
pub(super) fn stored_secret(
    name: String,
    namespace: String,
    scope: &str,
    stored: &str,
) -> Option<crate::render::SealedSecret> {
    let stored: serde_json::Value = serde_json::from_str(stored).ok()?;
    Some(crate::render::SealedSecret {
        name,
        namespace,
        scope: crate::seal::Scope::parse(scope)?.as_str(),
        type_: stored["type"].as_str()?.to_owned(),
        labels: serde_json::from_value(stored["labels"].clone()).ok()?,
        encrypted_data: serde_json::from_value(stored["data"].clone()).ok()?,
        // Absent in what was sealed before public values were carried plain.
        template_data: match &stored["plain"] {
            serde_json::Value::Null => Default::default(),
            plain => serde_json::from_value(plain.clone()).ok()?,
        },
    })
}

/// The stored form of a sealed secret's values (`stored_secret` reads it back).
pub(super) fn secret_to_store(secret: &crate::render::SealedSecret) -> String {
    let mut stored = serde_json::json!({"type": secret.type_, "labels": secret.labels, "data": secret.encrypted_data});
    if !secret.template_data.is_empty() {
        stored["plain"] = serde_json::json!(secret.template_data);
    }
    stored.to_string()
}

/// A preview's newly sealed values (sealed and public ones: a secret's plaintext never gets
/// here), stored with the ledger's intent of the apply that first carries them.
pub struct NewSecrets {
    /// namespace, name, scope, stored values, and the certificate they were sealed for.
    pub(super) rows: Vec<(String, String, &'static str, String, String)>,
}

impl NewSecrets {
    pub fn new(secrets: &[crate::render::SealedSecret], fingerprint: &str) -> Self {
        Self::adding(&[], secrets, fingerprint)
    }

    /// The stored values, each with its own certificate, and `added` sealed now for
    /// `fingerprint` (the Secrets of a service a repository turned on after its previews
    /// were first sealed).
    pub fn adding(
        stored: &[(crate::render::SealedSecret, String)],
        added: &[crate::render::SealedSecret],
        fingerprint: &str,
    ) -> Self {
        let row = |s: &crate::render::SealedSecret, fingerprint: &str| {
            (
                s.namespace.clone(),
                s.name.clone(),
                s.scope,
                secret_to_store(s),
                fingerprint.to_owned(),
            )
        };
        Self {
            rows: stored
                .iter()
                .map(|(s, fingerprint)| row(s, fingerprint))
                .chain(added.iter().map(|s| row(s, fingerprint)))
                .collect(),
        }
    }

    /// Replaces the preview's stored values with these.
    pub(super) fn write(
        &self,
        tx: &rusqlite::Transaction<'_>,
        id: i64,
        now: i64,
    ) -> rusqlite::Result<()> {
        tx.prepare_cached("DELETE FROM sealed_secrets WHERE preview_id = ?1")?
            .execute(params![id])?;
        let mut insert = tx.prepare_cached(
            "INSERT INTO sealed_secrets (preview_id, namespace, name, scope, cert_fingerprint, encrypted_data, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?;
        for (namespace, name, scope, stored, fingerprint) in &self.rows {
            insert.execute(params![
                id,
                namespace,
                name,
                scope,
                fingerprint,
                stored,
                now
            ])?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn sealed(template_data: BTreeMap<String, String>) -> crate::render::SealedSecret {
        crate::render::SealedSecret {
            name: "db".into(),
            namespace: "pv-octo-app-pr-7".into(),
            scope: "strict",
            type_: "Opaque".into(),
            labels: BTreeMap::new(),
            encrypted_data: [("PGPASSWORD".into(), "AgB=".into())].into(),
            template_data,
        }
    }

    #[test]
    fn a_stored_secret_keeps_its_public_values() {
        let secret = sealed([("PGHOST".into(), "postgres.svc".into())].into());
        let stored = secret_to_store(&secret);
        let read = stored_secret("db".into(), "pv-octo-app-pr-7".into(), "strict", &stored);
        assert_eq!(read, Some(secret));
    }

    /// Sealed before public values rode unsealed: read as it was, so its rendering and its
    /// hash do not move.
    #[test]
    fn a_secret_stored_before_public_values_reads_with_none() {
        let stored = r#"{"type":"Opaque","labels":{},"data":{"PGPASSWORD":"AgB="}}"#;
        let read = stored_secret("db".into(), "pv-octo-app-pr-7".into(), "strict", stored);
        assert_eq!(read, Some(sealed(BTreeMap::new())));
    }
}
