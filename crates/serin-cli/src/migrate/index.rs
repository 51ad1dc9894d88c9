//! Lookups across every input document, and what the Rollouts among them refer to: the objects
//! they route through, the autoscalers that scale them, and the AnalysisTemplates converted ahead.

use super::analysis_templates::{TemplateConversion, TemplateReference};
use super::documents::{ARGO_GROUP, Document, api_group, name_of, namespace_of, same_namespace};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Lookups across every input document, and what the Rollouts among them refer to. The Rollout
/// conversion fills it in, since it knows what a Rollout refers to.
pub(super) struct Index<'a> {
    pub(super) documents: &'a [Document],
    /// Services, VirtualServices and DestinationRules a Rollout routes through: they are left
    /// out of the output, since Serin writes its own.
    pub(super) replaced: BTreeMap<usize, Replacement>,
    /// HorizontalPodAutoscalers scaling a Rollout, by document.
    pub(super) rollout_autoscalers: BTreeSet<usize>,
    /// AnalysisTemplates converted ahead of the Rollouts that use them, by document.
    pub(super) templates: BTreeMap<usize, TemplateConversion>,
}

/// Why an object a Rollout routes through is left out.
pub(super) struct Replacement {
    pub(super) rollout: String,
    pub(super) role: String,
    /// The apex Service name the Canary uses.
    pub(super) service_name: String,
}

impl<'a> Index<'a> {
    /// The document of that group, kind and name; a missing namespace on either side matches any.
    pub(super) fn find(
        &self,
        group: &str,
        kind: &str,
        name: &str,
        namespace: Option<&str>,
    ) -> Option<usize> {
        self.documents.iter().position(|d| {
            api_group(&d.value) == group
                && d.value["kind"] == kind
                && name_of(&d.value) == name
                && same_namespace(namespace_of(&d.value), namespace)
        })
    }

    pub(super) fn find_template(
        &self,
        template: &TemplateReference,
        namespace: Option<&str>,
    ) -> Option<usize> {
        if template.cluster_scope {
            self.find(ARGO_GROUP, "ClusterAnalysisTemplate", &template.name, None)
        } else {
            self.find(ARGO_GROUP, "AnalysisTemplate", &template.name, namespace)
        }
    }

    pub(super) fn value(&self, position: usize) -> &'a Value {
        &self.documents[position].value
    }
}
