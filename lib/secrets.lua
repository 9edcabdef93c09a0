-- Secrets that must be used in clear later (platform tokens, webhook signing
-- secrets) are stored encrypted with AES-256-GCM under crypto.encryption_key.
-- The associated data binds a ciphertext to its row, so a value copied to
-- another row does not decrypt.
local M = {}

M.KEY_HELP = "crypto.encryption_key must be 32 random bytes in base64 (head -c 32 /dev/urandom | base64)"

-- The key's 32 bytes, or nil and what to do.
function M.key()
  local key = crypto.base64_decode(config.get("crypto.encryption_key") or "")
  if not key or #key ~= 32 then return nil, M.KEY_HELP end
  return key
end

-- base64 of nonce .. ciphertext .. tag, or nil and why.
function M.seal(plaintext, aad)
  local key, err = M.key()
  if not key then return nil, err end
  return crypto.base64_encode(crypto.aes_gcm_encrypt(key, plaintext, aad))
end

-- The plaintext, or nil and why.
function M.open(sealed, aad)
  local key, err = M.key()
  if not key then return nil, err end
  local blob = crypto.base64_decode(sealed or "")
  local plain = blob and crypto.aes_gcm_decrypt(key, blob, aad)
  if not plain then return nil, "a stored secret does not decrypt (was crypto.encryption_key changed?)" end
  return plain
end

return M
