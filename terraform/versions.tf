terraform {
  required_version = ">= 1.7.0" # mock_provider in tests/*.tftest.hcl

  required_providers {
    helm = {
      source  = "hashicorp/helm"
      version = ">= 3.0.0, < 4.0.0"
    }
    kubernetes = {
      source  = "hashicorp/kubernetes"
      version = ">= 2.31.0, < 4.0.0"
    }
  }
}
