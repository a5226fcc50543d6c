//! The data of the Secrets a Work places, held apart from the Work.
//!
//! The hub stores a Work as it is, outside the encryption at rest it may apply to Secrets, and
//! whoever may read Works reads all of it. So a Secret manifest in a Work has no `data` and no
//! `stringData`: the annotation [`DATA_SECRET`](crate::annotations::DATA_SECRET) names the hub
//! Secret that holds its data. The splitter writes one such Secret per Work that places Secrets:
//! of type [`SECRET_TYPE`], in the Work's namespace, named after the Work ([`secret_name`]),
//! labelled [`WORK_DATA`](crate::labels::WORK_DATA) and owned by the Work (the hub's garbage
//! collector deletes it with the Work). It holds one key per Secret manifest, the Secret's name,
//! whose value is that Secret's data, [`encode`]d. The syncer reads it when it applies a Secret
//! manifest and puts the data back into the object ([`decode`]).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;

/// The type of the hub Secrets that hold the data of a Work's Secrets.
pub const SECRET_TYPE: &str = "flotilla.dev/work-data";

/// The name of the hub Secret that holds the data of the Secrets Work `work` places: the
/// Work's own (a Secret and a Work of one name are two objects; the name is a valid Secret name
/// since it is a valid Work name).
pub fn secret_name(work: &str) -> String {
    work.to_string()
}

/// Why a value of a work-data Secret cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("the value is cut short")]
    Truncated,
    #[error("a key is not UTF-8")]
    Key,
}

/// One Secret's data as one value of a work-data Secret: for each key, in order, the key's
/// length (4 bytes, big-endian), the key, the value's length (the same) and the value. Raw
/// bytes rather than JSON with base64 inside: the value is no larger than the data itself, so
/// a Secret that fits the hub's limit of 1 MiB still fits.
pub fn encode(data: &BTreeMap<String, ByteString>) -> ByteString {
    let size = data.iter().map(|(k, v)| 8 + k.len() + v.0.len()).sum();
    let mut out = Vec::with_capacity(size);
    for (key, value) in data {
        for part in [key.as_bytes(), value.0.as_slice()] {
            // A key or value of 4 GiB is no Secret's: the apiserver refuses 1 MiB.
            let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(part);
        }
    }
    ByteString(out)
}

/// The data [`encode`] encoded into `bytes`.
pub fn decode(bytes: &[u8]) -> Result<BTreeMap<String, ByteString>, DecodeError> {
    fn take<'a>(rest: &mut &'a [u8]) -> Result<&'a [u8], DecodeError> {
        let (len, tail) = rest
            .split_first_chunk::<4>()
            .ok_or(DecodeError::Truncated)?;
        let len = usize::try_from(u32::from_be_bytes(*len)).map_err(|_| DecodeError::Truncated)?;
        if tail.len() < len {
            return Err(DecodeError::Truncated);
        }
        let (part, tail) = tail.split_at(len);
        *rest = tail;
        Ok(part)
    }
    let mut rest = bytes;
    let mut data = BTreeMap::new();
    while !rest.is_empty() {
        let key = std::str::from_utf8(take(&mut rest)?).map_err(|_| DecodeError::Key)?;
        let value = take(&mut rest)?;
        data.insert(key.to_string(), ByteString(value.to_vec()));
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &[u8])]) -> BTreeMap<String, ByteString> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
            .collect()
    }

    #[test]
    fn data_comes_back_as_it_was_encoded() {
        for d in [
            data(&[]),
            data(&[("password", b"s3cr3t")]),
            data(&[
                ("empty", b""),
                ("bin", &[0, 255, 10, 0]),
                ("tls.crt", b"PEM"),
            ]),
        ] {
            let encoded = encode(&d);
            assert_eq!(decode(&encoded.0), Ok(d.clone()));
            let size: usize = d.iter().map(|(k, v)| 8 + k.len() + v.0.len()).sum();
            assert_eq!(
                encoded.0.len(),
                size,
                "no larger than the data and its lengths"
            );
        }
    }

    #[test]
    fn a_damaged_value_is_refused() {
        let encoded = encode(&data(&[("password", b"s3cr3t")])).0;
        for cut in 1..encoded.len() {
            assert_eq!(
                decode(&encoded[..cut]),
                Err(DecodeError::Truncated),
                "cut at {cut}"
            );
        }
        let mut bad_key = encode(&data(&[("k", b"v")])).0;
        bad_key[4] = 0xff;
        assert_eq!(decode(&bad_key), Err(DecodeError::Key));
    }

    #[test]
    fn the_secret_is_named_after_its_work() {
        let work = crate::names::bundle_name("", "Secret", "shop", "spread", 0);
        assert_eq!(secret_name(&work), work);
    }
}
