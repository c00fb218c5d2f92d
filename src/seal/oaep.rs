//! RSA-OAEP-SHA256 encryption (RFC 8017 section 7.1.1) with a short public exponentiation.
//!
//! The `rsa` crate raises to the public exponent with crypto-bigint's constant-time windowed
//! power (`pow_bounded_exp`: a table of 16 powers, then a window of 4 bits at a time,
//! scanning the whole table each time): about 40 products for e = 65537, where
//! square-and-multiply needs 17. The exponent is public, so letting it steer the loop leaks
//! nothing; the products themselves are crypto-bigint's constant-time Montgomery ones. It
//! was 2.3 ms of a new preview's sealing (issue #17). The `rsa` crate's decryption checks
//! this encryption in the tests, and the independent sealed-secrets oracle in
//! tests/sealing.rs unseals what it sealed.

use crypto_bigint::BoxedUint;
use crypto_bigint::modular::BoxedMontyForm;
use rsa::PublicKey;
use rsa::traits::PublicKeyParts;
use sha2::{Digest, Sha256};
use zeroize::{Zeroize, Zeroizing};

const HASH: usize = 32;

/// `message` encrypted for `key` under `label`, `seed` being OAEP's 32 random bytes. What
/// holds the message or would give it back (the padded block, its powers, the seed) is
/// wiped before it is freed, as the `rsa` crate does.
pub(super) fn encrypt(
    key: &PublicKey,
    label: &[u8],
    message: &[u8],
    seed: [u8; HASH],
) -> Result<Vec<u8>, &'static str> {
    raise(key, &pad(key.size(), label, message, seed)?)
}

/// EME-OAEP encoding into `k` bytes: EM = 0x00 || maskedSeed || maskedDB, where
/// DB = lHash || PS (zeros) || 0x01 || M.
fn pad(
    k: usize,
    label: &[u8],
    message: &[u8],
    mut seed: [u8; HASH],
) -> Result<Zeroizing<Vec<u8>>, &'static str> {
    if message.len() + 2 * HASH + 2 > k {
        return Err("message too long for the key");
    }
    let mut em = Zeroizing::new(vec![0u8; k]);
    let (seed_part, db) = em[1..].split_at_mut(HASH);
    seed_part.copy_from_slice(&seed);
    seed.zeroize();
    db[..HASH].copy_from_slice(&Sha256::digest(label));
    let start = db.len() - message.len();
    db[start - 1] = 0x01;
    db[start..].copy_from_slice(message);
    mgf1_xor(db, seed_part);
    mgf1_xor(seed_part, db);
    Ok(em)
}

/// `em` raised to the public exponent modulo n, as `k` bytes: square-and-multiply, the
/// exponent's bits from the top.
fn raise(key: &PublicKey, em: &[u8]) -> Result<Vec<u8>, &'static str> {
    let params = key.n_params();
    let m = BoxedUint::from_be_slice(em, params.bits_precision())
        .map_err(|_| "message does not fit the modulus")?;
    let base = Zeroizing::new(BoxedMontyForm::new(m, params));
    let e = key.e();
    let mut power = Zeroizing::new((*base).clone());
    for bit in (0..e.bit_width_vartime().saturating_sub(1)).rev() {
        let mut next = power.square();
        if e.bit_vartime(bit) {
            next = next.mul(&base);
        }
        *power = next;
    }
    let c = power.retrieve().to_be_bytes();
    // The value is below n, so only the storage's leading bytes past k are zeros.
    Ok(c[c.len() - key.size()..].to_vec())
}

/// XORs `out` with MGF1-SHA256(`seed`) (RFC 8017 appendix B.2.1).
fn mgf1_xor(out: &mut [u8], seed: &[u8]) {
    for (counter, chunk) in (0u32..).zip(out.chunks_mut(HASH)) {
        let mask = Sha256::new()
            .chain_update(seed)
            .chain_update(counter.to_be_bytes())
            .finalize();
        chunk.iter_mut().zip(mask).for_each(|(o, m)| *o ^= m);
    }
}

#[cfg(test)]
mod tests {
    use rsa::oaep::DecryptingKey;
    use rsa::traits::Decryptor;

    use super::*;

    fn private_key() -> rsa::PrivateKey {
        let pem = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/sealed/test-key.pem"
        ))
        .unwrap();
        crate::seal::private_key_from_pem(&pem).unwrap()
    }

    #[test]
    fn what_it_encrypts_the_rsa_crates_oaep_decrypts_for_the_same_label_only() {
        let key = private_key();
        let public = key.to_public_key();
        for (i, message) in [&[][..], b"k", &[7u8; 32], &[0xff; 446]]
            .into_iter()
            .enumerate()
        {
            let seed = [u8::try_from(i).unwrap(); HASH];
            let sealed = encrypt(&public, b"ns/name", message, seed).unwrap();
            assert_eq!(sealed.len(), public.size());
            let opened =
                DecryptingKey::<rsa::sha2::Sha256>::new_with_label(key.clone(), *b"ns/name")
                    .decrypt(&sealed)
                    .unwrap();
            assert_eq!(opened, message);
            assert!(
                DecryptingKey::<rsa::sha2::Sha256>::new_with_label(key.clone(), *b"ns/other")
                    .decrypt(&sealed)
                    .is_err()
            );
        }
    }

    /// Moduli that fill no whole 64-bit word (the ciphertext is the modulus's byte length,
    /// shorter than the integer's storage), a 2048-bit one (crypto-bigint squares 32 words
    /// its own way) and e = 3.
    #[test]
    fn odd_sized_moduli_and_a_small_exponent_round_trip() {
        for (bits, e) in [(2047, 65537u64), (2048, 65537), (2049, 3)] {
            let key =
                rsa::PrivateKey::new_with_exp(&mut getrandom::SysRng, bits, BoxedUint::from(e))
                    .unwrap();
            let public = key.to_public_key();
            assert_eq!(public.size(), bits.div_ceil(8));
            let message = vec![0x5a; public.size() - 2 * HASH - 2];
            let sealed = encrypt(&public, b"l", &message, [9; HASH]).unwrap();
            assert_eq!(sealed.len(), public.size(), "{bits} bits");
            let opened = DecryptingKey::<rsa::sha2::Sha256>::new_with_label(key, *b"l")
                .decrypt(&sealed)
                .unwrap();
            assert_eq!(opened, message, "{bits} bits, e = {e}");
        }
    }

    #[test]
    fn a_message_past_the_keys_room_is_refused() {
        let public = private_key().to_public_key();
        let room = public.size() - 2 * HASH - 2;
        assert!(encrypt(&public, b"", &vec![1; room + 1], [0; HASH]).is_err());
    }

    #[test]
    fn the_power_is_the_rsa_crates_raw_encryption() {
        let public = private_key().to_public_key();
        let em = pad(public.size(), b"", b"x", [3u8; HASH]).unwrap();
        let m = BoxedUint::from_be_slice(&em, public.n_params().bits_precision()).unwrap();
        let theirs = rsa::hazmat::rsa_encrypt(&public, &m).unwrap().to_be_bytes();
        assert_eq!(
            raise(&public, &em).unwrap(),
            theirs[theirs.len() - public.size()..]
        );
    }
}
