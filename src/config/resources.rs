//! What one preview may use and how long it may idle: the keys `sleep_after`, `cpu`,
//! `memory`, `pods`, `container_cpu` and `container_memory` of `[defaults]` and `[[repos]]`,
//! read into a `Resources` the helpers' chart renders as the namespace's ResourceQuota and
//! LimitRange.

use std::fmt;
use std::time::Duration;

use super::ConfigError;
use super::validate::Validator;

/// The bounds of one preview namespace: its ResourceQuota (`cpu`, `memory`, `pods`) and the
/// LimitRange defaults for containers that declare nothing (`container_cpu`,
/// `container_memory`). A quota on requests makes every pod declare them or be refused, so
/// the LimitRange fills them in: the helpers' migration and seed Jobs declare none either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resources {
    /// `requests.cpu` of the whole namespace.
    pub cpu: Cpu,
    /// `requests.memory` and `limits.memory` of the whole namespace.
    pub memory: Memory,
    pub pods: u32,
    /// A container's CPU request when it names none.
    pub container_cpu: Cpu,
    /// A container's memory request and limit when it names none.
    pub container_memory: Memory,
}

/// CPU in thousandths of a core, written as Kubernetes writes it back (`500m`, `2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cpu(pub u64);

/// Memory in bytes, written in the largest binary unit that divides it (`256Mi`, `8Gi`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Memory(pub u64);

/// No preview asks for more than this many cores or pods: a typo (`4000` for `4000m`) is
/// refused rather than lifting every bound.
const MAX_CORES: u64 = 256;
const MAX_PODS: u32 = 1_000;
const MAX_MEMORY: u64 = 1 << 40;

impl Cpu {
    /// `2`, `0.5`, `500m`.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let millis = match text.strip_suffix('m') {
            Some(m) => digits(m)?.parse::<u64>().ok()?,
            None => {
                let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
                if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                let frac_millis = format!("{frac:0<3}").parse::<u64>().ok()?;
                digits(whole)?.parse::<u64>().ok()?.checked_mul(1000)? + frac_millis
            }
        };
        (millis > 0 && millis <= MAX_CORES * 1000).then_some(Self(millis))
    }
}

impl Memory {
    /// `512Mi`, `8Gi`, `1073741824`; binary units only (`Ki`, `Mi`, `Gi`, `Ti`).
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let (number, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
            Some((i, _)) => text.split_at(i),
            None => (text, ""),
        };
        let shift = match unit {
            "" => 0,
            "Ki" => 10,
            "Mi" => 20,
            "Gi" => 30,
            "Ti" => 40,
            _ => return None,
        };
        let bytes = digits(number)?
            .parse::<u64>()
            .ok()?
            .checked_mul(1 << shift)?;
        (bytes > 0 && bytes <= MAX_MEMORY).then_some(Self(bytes))
    }
}

fn digits(s: &str) -> Option<&str> {
    (!s.is_empty() && s.len() <= 12 && s.bytes().all(|b| b.is_ascii_digit())).then_some(s)
}

impl fmt::Display for Cpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 % 1000 == 0 {
            write!(f, "{}", self.0 / 1000)
        } else {
            write!(f, "{}m", self.0)
        }
    }
}

impl fmt::Display for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (unit, shift) in [("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)] {
            if self.0 % (1 << shift) == 0 {
                return write!(f, "{}{unit}", self.0 >> shift);
            }
        }
        write!(f, "{}", self.0)
    }
}

impl Validator {
    /// `sleep_after`: a positive duration, or `none` (never sleeps).
    pub(super) fn sleep_after(
        &self,
        key: &str,
        text: Option<&str>,
        base: Option<Option<Duration>>,
    ) -> Result<Option<Duration>, ConfigError> {
        match (text.map(str::trim), base) {
            (Some("none"), _) | (None, None) => Ok(None),
            (None, Some(inherited)) => Ok(inherited),
            (Some(text), _) => self.duration(key, Some(text), "").map(Some),
        }
    }

    /// The bounds of `section` (`defaults` or `repos[i]`), each key falling back to `base`'s
    /// (a repository's to `[defaults]`) or to its declared default.
    pub(super) fn resources(
        &self,
        section: &str,
        text: &dyn Fn(&str) -> Option<String>,
        base: Option<&Resources>,
    ) -> Result<Resources, ConfigError> {
        let key = |field: &str| format!("{section}.{field}");
        let declared = |field: &str| super::keys::default_of(&format!("defaults.{field}"));
        let cpu = |field: &str, inherited: Option<Cpu>| -> Result<Cpu, ConfigError> {
            let given = text(field);
            match (given, inherited) {
                (None, Some(cpu)) => Ok(cpu),
                (given, _) => {
                    let t = given.unwrap_or_else(|| declared(field).to_owned());
                    Cpu::parse(&t).ok_or_else(|| {
                        self.invalid(
                            &key(field),
                            format!("{t:?} is not an amount of CPU"),
                            "cores like 2 or 0.5, or thousandths like 500m (at most 256 cores)",
                        )
                    })
                }
            }
        };
        let memory = |field: &str, inherited: Option<Memory>| -> Result<Memory, ConfigError> {
            match (text(field), inherited) {
                (None, Some(memory)) => Ok(memory),
                (given, _) => {
                    let t = given.unwrap_or_else(|| declared(field).to_owned());
                    Memory::parse(&t).ok_or_else(|| {
                        self.invalid(
                            &key(field),
                            format!("{t:?} is not an amount of memory"),
                            "bytes with a binary unit: 256Mi, 8Gi (Ki, Mi, Gi, Ti; at most 1Ti)",
                        )
                    })
                }
            }
        };
        let pods = match (text("pods"), base) {
            (None, Some(b)) => b.pods,
            (given, _) => {
                let t = given.unwrap_or_else(|| declared("pods").to_owned());
                t.trim()
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=MAX_PODS).contains(n))
                    .ok_or_else(|| {
                        self.invalid(
                            &key("pods"),
                            format!("{t:?} is not a number of pods"),
                            "a whole number from 1 to 1000",
                        )
                    })?
            }
        };
        let resources = Resources {
            cpu: cpu("cpu", base.map(|b| b.cpu))?,
            memory: memory("memory", base.map(|b| b.memory))?,
            pods,
            container_cpu: cpu("container_cpu", base.map(|b| b.container_cpu))?,
            container_memory: memory("container_memory", base.map(|b| b.container_memory))?,
        };
        // A default no single container could be admitted with would refuse every pod.
        if resources.container_cpu > resources.cpu {
            return Err(self.invalid(
                &key("container_cpu"),
                format!(
                    "{} is more than the namespace's cpu {}",
                    resources.container_cpu, resources.cpu
                ),
                "a container default no larger than `cpu`",
            ));
        }
        if resources.container_memory > resources.memory {
            return Err(self.invalid(
                &key("container_memory"),
                format!(
                    "{} is more than the namespace's memory {}",
                    resources.container_memory, resources.memory
                ),
                "a container default no larger than `memory`",
            ));
        }
        Ok(resources)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_read_in_cores_or_thousandths_and_written_back_as_kubernetes_does() {
        assert_eq!(Cpu::parse("2"), Some(Cpu(2000)));
        assert_eq!(Cpu::parse("0.5"), Some(Cpu(500)));
        assert_eq!(Cpu::parse("1.25"), Some(Cpu(1250)));
        assert_eq!(Cpu::parse("250m"), Some(Cpu(250)));
        assert_eq!(Cpu(2000).to_string(), "2");
        assert_eq!(Cpu(250).to_string(), "250m");
        for bad in [
            "", "0", "0m", "-1", "1.2345", "2 cores", "1e3", "257", "m", "1.5m",
        ] {
            assert_eq!(Cpu::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn memory_takes_binary_units_only_and_is_written_in_the_largest_that_divides_it() {
        assert_eq!(Memory::parse("256Mi"), Some(Memory(256 << 20)));
        assert_eq!(Memory::parse("8Gi"), Some(Memory(8 << 30)));
        assert_eq!(Memory::parse("1024"), Some(Memory(1024)));
        assert_eq!(Memory(1536 << 20).to_string(), "1536Mi");
        assert_eq!(Memory(2 << 30).to_string(), "2Gi");
        assert_eq!(Memory(1000).to_string(), "1000");
        for bad in ["", "0Mi", "8G", "8GB", "1.5Gi", "-1Gi", "2Ti", "Mi"] {
            assert_eq!(Memory::parse(bad), None, "{bad:?}");
        }
    }
}
