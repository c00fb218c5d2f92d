-- The sealing certificate each cluster was last seen with: when a controller renews its
-- key, previewd notices the new fingerprint and re-seals that cluster's live previews.
CREATE TABLE cluster_certs (
    cluster     TEXT    PRIMARY KEY,
    fingerprint TEXT    NOT NULL,
    not_after   INTEGER NOT NULL,
    seen_at     INTEGER NOT NULL
);
