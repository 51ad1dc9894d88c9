//! What the conversion says about what it could not carry over: the warnings, the report each
//! converter writes them to, and Serin's own validation of a converted object as warnings.

use serde_json::Value;

/// A field (or a whole object) without a Serin equivalent, and what the conversion did with it.
#[derive(Clone, Debug, PartialEq)]
pub struct Warning {
    /// The input file.
    pub file: String,
    /// The object, as `Kind name`.
    pub object: String,
    /// The field path inside the object, when the warning is about one field.
    pub path: Option<String>,
    /// What has no equivalent and what happened to it.
    pub message: String,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.path {
            Some(path) => write!(
                f,
                "{}: {}: {path}: {}",
                self.file, self.object, self.message
            ),
            None => write!(f, "{}: {}: {}", self.file, self.object, self.message),
        }
    }
}

/// Where warnings go while one object is converted.
pub(super) struct Report<'a> {
    pub(super) file: &'a str,
    pub(super) object: String,
    pub(super) warnings: &'a mut Vec<Warning>,
}

impl Report<'_> {
    pub(super) fn field(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.warnings.push(Warning {
            file: self.file.to_string(),
            object: self.object.clone(),
            path: Some(path.into()),
            message: message.into(),
        });
    }

    pub(super) fn object_warning(&mut self, message: impl Into<String>) {
        self.warnings.push(Warning {
            file: self.file.to_string(),
            object: self.object.clone(),
            path: None,
            message: message.into(),
        });
    }

    /// Serin's own validation of a converted object: each problem is a warning, since the operator
    /// would refuse the object until it is fixed.
    pub(super) fn validation(&mut self, problems: Vec<serin_api::FieldError>) {
        for problem in problems {
            self.field(
                problem.path,
                format!("Serin refuses this: {}", problem.message),
            );
        }
    }
}

/// Runs Serin's validation of a Canary, MetricTemplate or AlertProvider.
pub(super) fn validate_serin_object(value: &Value, report: &mut Report) {
    let problems = match value["kind"].as_str() {
        Some("Canary") => serde_json::from_value::<serin_api::Canary>(value.clone())
            .map(|canary| serin_api::validate::validate(&canary)),
        Some("MetricTemplate") => {
            serde_json::from_value::<serin_api::MetricTemplate>(value.clone())
                .map(|template| serin_api::validate::validate_metric_template(&template))
        }
        Some("AlertProvider") => serde_json::from_value::<serin_api::AlertProvider>(value.clone())
            .map(|provider| serin_api::validate::validate_alert_provider(&provider)),
        _ => return,
    };
    match problems {
        Ok(problems) => report.validation(problems),
        Err(error) => report.object_warning(format!(
            "does not decode as a Serin {}: {error}",
            value["kind"].as_str().unwrap_or_default()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_name_the_file_object_and_field() {
        let warning = Warning {
            file: "rollout.yaml".into(),
            object: "Rollout podinfo".into(),
            path: Some("spec.strategy.canary.steps[2].experiment".into()),
            message: "no equivalent".into(),
        };
        assert_eq!(
            warning.to_string(),
            "rollout.yaml: Rollout podinfo: spec.strategy.canary.steps[2].experiment: no equivalent"
        );
    }
}
