//! Sealing benchmark: values sealed per second for an RSA-4096 controller certificate, on
//! one core (one thread), plus whole previews (all of a preview's database secrets) and the
//! SCRAM verifier each of them holds.
//!
//! Run: `cargo bench --bench seal` (option: `-- --values 5000`).

use std::time::Instant;

use previewd::seal::{Scope, SealingCert, seal_value};

fn main() {
    let values: usize = std::env::args()
        .collect::<Vec<_>>()
        .windows(2)
        .find(|w| w[0] == "--values")
        .map_or(5_000, |w| w[1].parse().expect("--values N"));
    let pem = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/sealed/test-cert.pem"
    ))
    .unwrap();
    let cert = SealingCert::from_pem(&pem, 0).unwrap();
    let plaintext = b"postgres://octo_app_pr_7:0123456789abcdef0123456789abcdef@postgres.previewd-system.svc:5432/octo_app_pr_7";

    let start = Instant::now();
    for i in 0..values {
        let name = format!("secret-{i}");
        std::hint::black_box(
            seal_value(&cert, Scope::Strict, "octo-app-pr-7", &name, plaintext).unwrap(),
        );
    }
    let elapsed = start.elapsed();
    println!(
        "seal: {values} values ({} bytes each, RSA-4096, one thread) in {:.2} s = {:.0} values/s ({:.1} µs per value)",
        plaintext.len(),
        elapsed.as_secs_f64(),
        values as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / values as f64
    );

    let verifiers = values / 10;
    let start = Instant::now();
    for i in 0..verifiers {
        let salt = u128::try_from(i).unwrap().to_le_bytes();
        std::hint::black_box(previewd::secrets::scram_verifier(
            "0123456789abcdef0123456789abcdef",
            &salt,
        ));
    }
    let elapsed = start.elapsed();
    println!(
        "verifiers: {verifiers} SCRAM-SHA-256 verifiers (4,096 rounds) in {:.2} s = {:.1} µs each",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / verifiers as f64
    );

    let config = previewd::config::Config::from_toml("", Vec::new()).unwrap();
    let previews = values / 10;
    let start = Instant::now();
    for n in 1..=previews {
        let names = previewd::naming::Names::of(
            &format!("octo/app#{n}").parse().unwrap(),
            "preview.example.com",
        );
        for spec in previewd::secrets::database(&config, &names, &mut rand::rngs::OsRng) {
            std::hint::black_box(previewd::seal::seal_secret(&cert, &spec).unwrap());
        }
    }
    let elapsed = start.elapsed();
    println!(
        "previews: {previews} previews' database secrets (7 values each) in {:.2} s = {:.0} previews/s",
        elapsed.as_secs_f64(),
        previews as f64 / elapsed.as_secs_f64()
    );
}
