//! Writes the CRD YAML of every Flotilla kind into `crds/yaml/` (or the directory given).
//!
//! ```text
//! cargo run -p flotilla-api --bin crdgen            # write crds/yaml/*.yaml
//! cargo run -p flotilla-api --bin crdgen -- --check # exit 1 when crds/yaml is stale
//! cargo run -p flotilla-api --bin crdgen -- DIR     # write into DIR instead
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use flotilla_api::crdgen;

const USAGE: &str = "usage: crdgen [--check] [DIR]\n\n\
Writes one YAML file per Flotilla CRD into DIR (default: crds/yaml of the source tree) and removes\n\
YAML files there that no kind produces any more. With --check, writes nothing and exits 1 when DIR\n\
differs from what the types generate.";

fn main() -> ExitCode {
    let mut check = false;
    let mut dir: Option<PathBuf> = None;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--check" => check = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            flag if flag.starts_with('-') => {
                eprintln!("crdgen: unknown flag {flag}\n\n{USAGE}");
                return ExitCode::from(2);
            }
            path if dir.is_none() => dir = Some(PathBuf::from(path)),
            extra => {
                eprintln!("crdgen: unexpected argument {extra}\n\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let dir = dir.unwrap_or_else(crdgen::default_dir);

    if check {
        return match crdgen::check(&dir) {
            Ok(problems) if problems.is_empty() => {
                println!("{} is up to date", dir.display());
                ExitCode::SUCCESS
            }
            Ok(problems) => {
                for p in problems {
                    eprintln!("{p}");
                }
                eprintln!("run `{}` to regenerate", crdgen::REGENERATE);
                ExitCode::FAILURE
            }
            Err(e) => {
                eprintln!("crdgen: {e}");
                ExitCode::from(2)
            }
        };
    }

    match crdgen::write(&dir) {
        Ok(paths) => {
            for path in paths {
                println!("wrote {}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("crdgen: {e}");
            ExitCode::FAILURE
        }
    }
}
