-- The web pages' sessions on the server (issue 33): a cookie names one, and signing out
-- ends it here, so a copied cookie stops working at once instead of at its expiry.
CREATE TABLE web_session (
    id_sha256   text        PRIMARY KEY,             -- of the id the cookie holds
    tenant_id   text        NOT NULL,
    api_key_id  text,                                -- the key signed in with
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    ended_at    timestamptz                          -- signed out
);
-- Retention deletes sessions a day after they expired.
CREATE INDEX web_session_expires_idx ON web_session (expires_at);
