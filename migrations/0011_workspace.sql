-- The web workspace (/workspace, lib/workspace/): the people of a company,
-- their sign-in sessions, and "Connect with Facebook" attempts in progress.

-- A person who signs in to the workspace; one company each. Passwords are
-- Argon2id hashes (slow on purpose: people choose guessable secrets).
CREATE TABLE users (
  id             text PRIMARY KEY,
  company_id     text NOT NULL REFERENCES companies (id),
  email          text NOT NULL CHECK (email = lower(email) AND length(email) BETWEEN 3 AND 254),
  password_hash  text NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now(),
  last_login_at  timestamptz
);
CREATE UNIQUE INDEX users_email ON users (email);
CREATE INDEX users_company ON users (company_id);

-- A signed-in browser. The cookie carries a random token; only its SHA-256
-- is kept here, so a copy of this table signs nobody in.
CREATE TABLE workspace_sessions (
  id          text PRIMARY KEY,          -- SHA-256 (hex) of the cookie's token
  user_id     text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  company_id  text NOT NULL REFERENCES companies (id),
  created_at  timestamptz NOT NULL DEFAULT now(),
  expires_at  timestamptz NOT NULL
);
CREATE INDEX workspace_sessions_user ON workspace_sessions (user_id);
CREATE INDEX workspace_sessions_expiry ON workspace_sessions (expires_at);

-- One "Connect with Facebook" attempt: the OAuth state it sent (hashed),
-- bound to the session that started it; used once when Facebook sends the
-- browser back. The Pages found then wait here, encrypted, until the person
-- picks which to connect.
CREATE TABLE workspace_oauth_states (
  id           text PRIMARY KEY,          -- SHA-256 (hex) of the state parameter
  session_id   text NOT NULL REFERENCES workspace_sessions (id) ON DELETE CASCADE,
  company_id   text NOT NULL REFERENCES companies (id),
  created_at   timestamptz NOT NULL DEFAULT now(),
  expires_at   timestamptz NOT NULL,
  returned_at  timestamptz,               -- Facebook sent the browser back (state used)
  pages_enc    text,                      -- AES-256-GCM, base64: the Pages and their tokens
  picked_at    timestamptz                -- the person chose; pages_enc is cleared
);
CREATE INDEX workspace_oauth_states_expiry ON workspace_oauth_states (expires_at);
